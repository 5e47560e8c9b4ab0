//! The API surface derived from the resource registry: discovery, OpenAPI, tables.

pub mod builtin;
pub mod crd;
pub mod discovery;
pub mod openapi;
pub mod resource;
pub mod table;
