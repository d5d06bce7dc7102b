"""Jobs larger than one NVLink domain: the plan that places every segment, and the segment given to a member
without a rank."""
