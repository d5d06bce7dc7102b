"""HTTP views: translate requests to and from the engine; no decisions here."""
