"""wamdiff2_core.diffusion"""
