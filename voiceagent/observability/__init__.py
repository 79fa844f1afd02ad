"""What the service tells about itself: metrics and traces (issue 15)."""
