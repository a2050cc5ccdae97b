"""wamdiff2_core.decoding"""
