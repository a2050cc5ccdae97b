"""wamdiff2_core.sim"""
