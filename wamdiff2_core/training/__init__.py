"""wamdiff2_core.training"""
