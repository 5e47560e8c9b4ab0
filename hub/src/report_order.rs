//! Comparing Description statuses across the hub's streams and replicas: whether two say the
//! same, and whether an earlier stream's status arrived late. Pure functions, shared by the
//! index (which decides what to send again) and the status writer.

use atoll_crds::apps::DescriptionStatus;

/// Whether two Description statuses say the same, whatever their report orders.
pub fn same_status(a: &DescriptionStatus, b: &DescriptionStatus) -> bool {
    // Destructured so that a new field cannot be left out of the comparison unnoticed.
    let DescriptionStatus {
        phase,
        reason,
        manifest_statuses,
        observed_generation,
        conditions,
        report_order: _,
    } = a;
    *phase == b.phase
        && *reason == b.reason
        && *observed_generation == b.observed_generation
        && *manifest_statuses == b.manifest_statuses
        && *conditions == b.conditions
}

/// Whether an agent stream of `stream_epoch` must get a Description again, its status having
/// changed from `before` to `now` with neither written by this stream: `now` is an earlier
/// stream's write that this replica saw only after this stream began (the other replica's request
/// landing late, or this replica's watch catching up after an outage). This stream's report may
/// have been skipped meanwhile, because the index still showed the same status as it
/// ([`crate::status::description_status_write_needed`]); nothing would then replace the earlier
/// stream's status. Sent again, the Description is applied and reported once more. A status this
/// stream wrote and an older one replaced is [`crate::status::status_taken_back`]'s case.
pub fn earlier_stream_status_arrived(
    before: Option<&DescriptionStatus>,
    now: Option<&DescriptionStatus>,
    stream_epoch: u64,
) -> bool {
    let stream_epoch = i64::try_from(stream_epoch).unwrap_or(i64::MAX);
    let Some(now) = now else {
        return false;
    };
    let earlier_write = now
        .report_order
        .is_some_and(|o| o.epoch > 0 && o.epoch < stream_epoch);
    let not_this_streams =
        before.and_then(|b| b.report_order).map_or(0, |o| o.epoch) < stream_epoch;
    earlier_write && not_this_streams && !before.is_some_and(|b| same_status(b, now))
}
