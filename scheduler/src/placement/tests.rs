//! Unit tests of placement.
