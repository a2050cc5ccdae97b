"""Test-only: with WAMDIFF2_TEST_SLOW_SAVE=TEXT in the environment, a distributed checkpoint
whose path holds TEXT finishes writing its shards and then hangs for ten minutes before the
save returns, so a test can SIGKILL a run in the middle of a save (test_fsdp_resume.py)."""
import os

_MARK = os.environ.get("WAMDIFF2_TEST_SLOW_SAVE")
if _MARK:
    import time

    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    _finish = HuggingFaceStorageWriter.finish

    def _slow_finish(self, metadata, results):
        out = _finish(self, metadata, results)
        if _MARK in str(self.path):
            time.sleep(600)
        return out

    HuggingFaceStorageWriter.finish = _slow_finish
