"""wamdiff2_core.tasks"""
