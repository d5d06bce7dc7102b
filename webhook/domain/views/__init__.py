"""What operators read: per-domain figures, and the /inspect view of groups, reservations and attachments."""
