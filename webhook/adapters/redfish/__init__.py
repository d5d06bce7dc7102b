"""The Redfish Composition Service adapter: HTTP and sessions, payloads, the attach/detach converger, the client."""
