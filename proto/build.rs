//! Generates the tonic/prost code for `proto/hub.proto` with a vendored protoc, so that no
//! system package is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // A password must not reach a log through `{:?}`: src/lib.rs writes a redacting Debug.
    config.skip_debug([".atoll.hub.v1.PullCredentials"]);
    tonic_prost_build::configure()
        // Small initial stream buffers (see src/codec.rs).
        .codec_path("crate::codec::StreamCodec")
        .compile_with_config(config, &["proto/hub.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/hub.proto");
    Ok(())
}
