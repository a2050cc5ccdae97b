"""wamdiff2_core.model"""
