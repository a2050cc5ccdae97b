"""Thin ROS 2 layer over wamdiff2_core: node, message conversions, parameters, bag tools."""
