//! Unit tests of rendering.
