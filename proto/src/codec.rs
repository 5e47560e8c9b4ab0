//! The protobuf codec of the generated client and server, with small initial buffers.
//!
//! tonic's default buffers (8 KiB to encode and 8 KiB to decode, per call) are sized for unary
//! calls. A `Sync` stream lives as long as its agent and mostly carries acks, heartbeats and
//! reports of a few hundred bytes, so with the default every connected agent would keep 16 KiB
//! of buffers in the hub. These start at [`STREAM_BUFFER_BYTES`] and grow for larger messages.

use prost::Message;
use std::marker::PhantomData;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstDecoder, ProstEncoder};

/// Initial size of each stream's encode and decode buffers.
pub const STREAM_BUFFER_BYTES: usize = 1024;

/// When encoding, yield to the runtime after this many bytes (tonic's default).
const YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

/// A prost codec whose buffers start at [`STREAM_BUFFER_BYTES`]. Used by the generated code
/// (`codec_path` in `build.rs`).
#[derive(Debug)]
pub struct StreamCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for StreamCodec<T, U> {
    fn default() -> Self {
        StreamCodec(PhantomData)
    }
}

fn buffer_settings() -> BufferSettings {
    BufferSettings::new(STREAM_BUFFER_BYTES, YIELD_THRESHOLD_BYTES)
}

impl<T, U> Codec for StreamCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(buffer_settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(buffer_settings())
    }
}
