"""The mutating admission decision: what a pod's creation is patched with or denied for, and the
AdmissionReview codec."""
