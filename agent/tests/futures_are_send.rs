//! Compile-time check: the agent's futures are `Send`, so that many agents can be spawned on one
//! multi-threaded runtime (the 1,000-agent benchmark). This file fails to compile otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

fn assert_send<T: Send>(_: T) {}

#[allow(dead_code)]
async fn every_public_future_is_send(
    applier: atoll_applier::Applier,
    agent: atoll_agent::Agent,
    d: atoll_applier::Description,
    client: kube::Client,
) {
    assert_send(applier.apply(&d));
    assert_send(applier.delete("a", "b", "c"));
    let keep = std::collections::HashSet::new();
    assert_send(applier.prune_except(&keep));
    assert_send(applier.load_inventory());
    assert_send(atoll_agent::identity::load(&client, "ns"));
    let creds = atoll_agent::identity::Credentials::default();
    assert_send(atoll_agent::identity::store(&client, "ns", &creds, "x"));
    assert_send(atoll_applier::heartbeat::collect(&client));
    assert_send(agent.run(async {}));
}

#[test]
fn agent_and_applier_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<atoll_applier::Applier>();
    check::<atoll_agent::Agent>();
}
