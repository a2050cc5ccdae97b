"""wamdiff2 core: everything that is not ROS (never imports rclpy)."""

__version__ = "0.1.0"
