//! atoll agent (placeholder until the hub client and applier land).
