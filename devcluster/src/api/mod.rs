//! The API surface derived from the resource registry: discovery, OpenAPI, tables.

pub mod resource;
