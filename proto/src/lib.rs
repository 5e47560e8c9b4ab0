//! The hub-agent protocol (`proto/hub.proto`) and its generated tonic/prost code.
//!
//! Domain types stay out of here: the hub and the agent convert at their gRPC edges.

#![allow(clippy::all, missing_docs)]

pub mod codec;

/// Generated from `proto/hub.proto`, package `atoll.hub.v1`.
pub mod v1 {
    tonic::include_proto!("atoll.hub.v1");
}

impl std::fmt::Debug for v1::PullCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullCredentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// `encoded_len` and friends of the generated messages.
pub use prost::Message;
pub use v1::ProtocolVersion;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: v1::ProtocolVersion = v1::ProtocolVersion::V1;

impl v1::hub_message::Message {
    /// The message's sequence number on its stream; `None` for the Welcome and the Progress,
    /// which have none.
    pub fn seq(&self) -> Option<u64> {
        use v1::hub_message::Message;
        match self {
            Message::Welcome(_) | Message::Progress(_) => None,
            Message::Upsert(m) => Some(m.seq),
            Message::Removed(m) => Some(m.seq),
            Message::SnapshotComplete(m) => Some(m.seq),
            Message::Withheld(m) => Some(m.seq),
        }
    }
}

impl From<v1::agent_message::Message> for v1::AgentMessage {
    /// Not numbered yet: the agent numbers each message as it enters the stream.
    fn from(message: v1::agent_message::Message) -> Self {
        v1::AgentMessage {
            message: Some(message),
            seq: 0,
        }
    }
}

/// Where a numbered message falls in its stream ([`Sequence::observe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InSequence {
    /// The next one: handle it.
    Next,
    /// One handled already (a repeat): drop it.
    Repeat,
    /// Not the next one: a message was lost or overtaken (or the number is 0, none). Handling
    /// it could undo a newer message, so the stream must end and start again.
    Gap {
        /// The number the receiver waited for.
        expected: u64,
    },
}

/// The receiving end's check of one stream's sequence numbers (1, 2, 3, ...).
///
/// HTTP/2 delivers a gRPC stream's messages in order and once, so a repeat or a gap means a
/// peer or an intermediary broke the stream; the check keeps such a stream from rolling state
/// back rather than trusting the transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sequence {
    last: u64,
}

impl Sequence {
    /// The check of a stream whose first message carries `first`: `None` when it is 0 (a peer
    /// older than the numbers, whose stream is not checked), an error unless it is 1.
    pub fn starting_with(first: u64) -> Result<Option<Sequence>, tonic::Status> {
        match first {
            0 => Ok(None),
            1 => Ok(Some(Sequence { last: 1 })),
            seq => Err(out_of_sequence(seq, 1)),
        }
    }

    /// Checks `seq`, and takes it as the last one when it is the next.
    pub fn observe(&mut self, seq: u64) -> InSequence {
        if seq != 0 && seq == self.last.saturating_add(1) {
            self.last = seq;
            InSequence::Next
        } else if seq != 0 && seq <= self.last {
            InSequence::Repeat
        } else {
            InSequence::Gap {
                expected: self.last.saturating_add(1),
            }
        }
    }

    /// Checks the sender's word that it has sent every message up to `last_sent`: the number
    /// awaited when one of them has not arrived (lost, with no later message to show the gap).
    /// Its word comes in the stream after those messages, so none of them can still be on its
    /// way.
    pub fn missing(&self, last_sent: u64) -> Option<u64> {
        (last_sent > self.last).then(|| self.last.saturating_add(1))
    }
}

/// The status that ends a stream at a gap: ABORTED, which asks the peer to start again.
pub fn out_of_sequence(seq: u64, expected: u64) -> tonic::Status {
    tonic::Status::aborted(format!(
        "message {seq} arrived where {expected} was expected: the stream lost or reordered \
         messages; reconnect"
    ))
}

#[cfg(test)]
mod tests {
    use super::{InSequence, Sequence, v1};

    #[test]
    fn a_sequence_takes_the_next_drops_repeats_and_stops_at_gaps() {
        // (numbers observed in turn, what each was judged)
        let cases: Vec<(Vec<u64>, Vec<InSequence>)> = vec![
            (vec![1, 2, 3], vec![InSequence::Next; 3]),
            (
                vec![1, 1, 2, 1],
                vec![
                    InSequence::Next,
                    InSequence::Repeat,
                    InSequence::Next,
                    InSequence::Repeat,
                ],
            ),
            // Overtaken: 3 before 2.
            (
                vec![1, 3],
                vec![InSequence::Next, InSequence::Gap { expected: 2 }],
            ),
            // A gap is not taken as the last: the next one is still awaited.
            (
                vec![1, 3, 2],
                vec![
                    InSequence::Next,
                    InSequence::Gap { expected: 2 },
                    InSequence::Next,
                ],
            ),
            // Not numbered at all, first or later.
            (vec![0], vec![InSequence::Gap { expected: 1 }]),
            (
                vec![1, 0],
                vec![InSequence::Next, InSequence::Gap { expected: 2 }],
            ),
        ];
        for (numbers, want) in cases {
            let mut sequence = Sequence::default();
            let got: Vec<InSequence> = numbers.iter().map(|n| sequence.observe(*n)).collect();
            assert_eq!(got, want, "{numbers:?}");
        }
    }

    #[test]
    fn a_stream_is_checked_when_its_first_message_is_numbered_and_must_start_at_1() {
        assert_eq!(Sequence::starting_with(0).unwrap(), None);
        let mut started = Sequence::starting_with(1).unwrap().unwrap();
        assert_eq!(started.observe(1), InSequence::Repeat);
        assert_eq!(started.observe(2), InSequence::Next);
        let refused = Sequence::starting_with(2).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Aborted);
        assert!(
            refused.message().contains("message 2 arrived where 1"),
            "{refused:?}"
        );
    }

    #[test]
    fn a_message_the_sender_says_it_sent_but_never_arrived_is_missing() {
        let mut sequence = Sequence::default();
        assert_eq!(sequence.missing(0), None);
        assert_eq!(sequence.missing(1), Some(1));
        sequence.observe(1);
        sequence.observe(2);
        assert_eq!(sequence.missing(1), None);
        assert_eq!(sequence.missing(2), None);
        assert_eq!(sequence.missing(4), Some(3));
    }

    #[test]
    fn pull_credentials_never_print_their_password() {
        let credentials = v1::PullCredentials {
            username: "robot".into(),
            password: "hunter2".into(),
        };
        let chart = v1::Chart {
            credentials: Some(credentials),
            ..v1::Chart::default()
        };
        let printed = format!("{chart:?}");
        assert!(printed.contains("robot"), "{printed}");
        assert!(!printed.contains("hunter2"), "{printed}");
    }
}
