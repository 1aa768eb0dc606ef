"""ROS 2 interop: message conversion (this package) and rosbag2 recordings (vla_recover.data.rosbag)."""
