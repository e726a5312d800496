//! Empty: this crate only pins librdkafka's source (see Cargo.toml).
