import os, sys
if os.environ.get("SWITCH_FORCE"):                  # pin the interval: the node's own call is ignored
    sys.setswitchinterval(float(os.environ["SWITCH_FORCE"]))
    sys.setswitchinterval = lambda interval: None
