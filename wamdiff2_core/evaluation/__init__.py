"""wamdiff2_core.evaluation"""
