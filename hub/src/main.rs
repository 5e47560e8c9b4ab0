//! The `atoll-hub` binary (being written).

fn main() {}
