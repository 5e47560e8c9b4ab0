#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! What each atoll component may do, as the real kube-apiserver's RBAC says
//! (`kubectl auth can-i --list --as=system:serviceaccount:clusternet-system:<account>`), equals
//! what the README's "Permissions" section documents. Runs on the real tier only
//! (`FLEET_BACKEND=kube`): devcluster authorizes every request.
//!
//! Rights every authenticated user has (discovery, health, self reviews) are left out on both
//! sides. A row's scope "all namespaces" means the verbs hold in a namespace other than
//! `clusternet-system` too (a ClusterRole); "clusternet-system" lists the verbs granted there on
//! top of those (a Role); "each listed namespace" the verbs the narrower agent role
//! (`manifests/agent-namespaced`) adds in a namespace it was given. A rule limited to some
//! names reads `` `secrets` named `cluster-token` ``.
//!
//! RBAC is half of it: the ValidatingAdmissionPolicies of `manifests/parent/hub-admission.yaml`
//! narrow the hub further, and `kubectl auth can-i` does not see them. The other tests here try
//! the writes themselves (`--as` the component's ServiceAccount, `--dry-run=server`, which runs
//! authorization and admission but stores nothing).

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use atoll_e2e::kubectl::Kubectl;
use atoll_e2e::plan::Backend;
use support::Fleet;

/// The namespace the narrower agent role of child-2 is given.
const LISTED: &str = "shop";
const HUB: &str = "--as=system:serviceaccount:clusternet-system:atoll-hub";
const AGENT: &str = "--as=system:serviceaccount:clusternet-system:atoll-agent";

/// One fleet for the tests of this file: child-1 runs the default agent install, child-2 the
/// narrower role (`manifests/agent-namespaced`, given namespace `shop`).
static FLEET: Mutex<Weak<Fleet>> = Mutex::new(Weak::new());
static NARROWING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn fleet(test: &str) -> Option<Arc<Fleet>> {
    if support::backend() != Backend::Kube {
        eprintln!(
            "NOTICE: {test} skipped: RBAC and admission need the real tier (FLEET_BACKEND=kube runs it)"
        );
        return None;
    }
    if !support::prerequisites_or_skip(test).await {
        return None;
    }
    let fleet = support::shared(&FLEET, 2).await;
    let _one_at_a_time = NARROWING.lock().await;
    install_narrower_agent(&fleet).await;
    Some(fleet)
}

/// Installs `manifests/agent-namespaced` in child-2 as `manifests/agent/README.md` tells users
/// to: an overlay with one RoleBinding per listed namespace and `namespaces=` in the connection
/// Secret (the Deployment stays at zero replicas: the fleet runs the agent as a process). The
/// administrator creates the listed namespace. Idempotent.
async fn install_narrower_agent(fleet: &Fleet) {
    let child = fleet.child("child-2");
    let dir = fleet.tmp.path().join("agent-namespaced-overlay");
    std::fs::create_dir_all(&dir).unwrap();
    let base =
        atoll_e2e::install::relative_path(&dir, &support::manifests().join("agent-namespaced"));
    let binding = std::fs::read_to_string(
        support::manifests().join("agent-namespaced/writer-rolebinding.yaml"),
    )
    .unwrap()
    .replace("namespace: my-app", &format!("namespace: {LISTED}"));
    std::fs::write(dir.join("writer-shop.yaml"), binding).unwrap();
    std::fs::write(
        dir.join("shop.yaml"),
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {LISTED}\n"),
    )
    .unwrap();
    let overlay = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\n  - shop.yaml\n  - writer-shop.yaml\npatches:\n  - target:\n      kind: Deployment\n    patch: |-\n      - op: replace\n        path: /spec/replicas\n        value: 0\nsecretGenerator:\n  - name: atoll-agent-hub\n    namespace: clusternet-system\n    behavior: merge\n    literals:\n      - namespaces={LISTED}\n",
        base.display()
    );
    atoll_e2e::install::apply_overlay(child, &dir, &overlay)
        .await
        .unwrap();
}

/// `kubectl <args>` expected to be refused; returns the error text.
async fn refused(k: &Kubectl, what: &str, args: &[&str]) -> String {
    match k.run(args).await {
        Ok(out) => panic!("{what}: allowed, but must be refused ({out})"),
        Err(e) => e.to_string(),
    }
}

/// `kubectl <args>` expected to succeed.
async fn allowed(k: &Kubectl, what: &str, args: &[&str]) -> String {
    k.run(args)
        .await
        .unwrap_or_else(|e| panic!("{what}: refused, but must be allowed: {e}"))
}

/// `kubectl apply --server-side --dry-run=server` of `yaml` (written under `name`).
fn apply_args(fleet: &Fleet, name: &str, yaml: &str) -> Vec<String> {
    let path = fleet.tmp.path().join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    [
        "apply",
        "--server-side",
        "--field-manager=atoll-hub",
        "--force-conflicts",
        "--dry-run=server",
        "-f",
        path.to_str().unwrap(),
    ]
    .map(str::to_string)
    .to_vec()
}

fn token_secret(namespace: &str, type_: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cluster-token\n  namespace: {namespace}\n  annotations:\n    kubernetes.io/service-account.name: default\ntype: {type_}\ndata:\n  sha256: YWJj\n"
    )
}

/// (resource, scope) -> verbs, as compared.
type Rights = BTreeMap<(String, String), String>;

const EVERYONE: [&str; 4] = [
    "selfsubjectreviews.authentication.k8s.io",
    "selfsubjectaccessreviews.authorization.k8s.io",
    "selfsubjectrulesreviews.authorization.k8s.io",
    // Readable by every authenticated user in newer Kubernetes (seen on v1.37.2, not v1.33).
    "clustertrustbundles.certificates.k8s.io",
];

/// The bracketed lists of a `kubectl auth can-i --list` row after its resource: non-resource
/// URLs, resource names, verbs.
fn bracket_lists(rest: &str) -> Vec<Vec<String>> {
    rest.split('[')
        .skip(1)
        .map(|part| {
            part.split(']')
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect()
        })
        .collect()
}

/// `resource -> sorted verbs` from `kubectl auth can-i --list` (resource rows only); a rule
/// limited to resource names is keyed `resource named a, b`.
fn parse_can_i(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().skip(1) {
        if line.starts_with(' ') || line.trim().is_empty() {
            continue; // a non-resource URL
        }
        let (resource, rest) = line.split_once(' ').unwrap_or((line, ""));
        if EVERYONE.contains(&resource) || resource.starts_with('[') {
            continue;
        }
        let lists = bracket_lists(rest);
        let mut names = lists.get(1).cloned().unwrap_or_default();
        names.sort();
        let key = if names.is_empty() {
            resource.to_string()
        } else {
            format!("{resource} named {}", names.join(", "))
        };
        let entry = out.entry(key).or_default();
        entry.extend(lists.get(2).cloned().unwrap_or_default());
        entry.sort();
        entry.dedup();
    }
    out
}

/// What `account` may do, by scope: in `default` ("all namespaces"), and on top of that in
/// `clusternet-system` and in `listed` ("each listed namespace").
async fn effective(k: &Kubectl, account: &str, listed: Option<&str>) -> Rights {
    let who = format!("--as=system:serviceaccount:clusternet-system:{account}");
    let list = |ns: String| {
        let who = who.clone();
        async move {
            parse_can_i(
                &k.run(&["auth", "can-i", "--list", &who, "-n", &ns])
                    .await
                    .unwrap(),
            )
        }
    };
    let everywhere = list("default".into()).await;
    let mut scopes = vec![("clusternet-system", list("clusternet-system".into()).await)];
    if let Some(ns) = listed {
        scopes.push(("each listed namespace", list(ns.into()).await));
    }
    let mut rights = Rights::new();
    for (resource, verbs) in &everywhere {
        rights.insert(
            (resource.clone(), "all namespaces".to_string()),
            verbs.join(", "),
        );
    }
    for (scope, granted) in scopes {
        for (resource, verbs) in granted {
            let base = everywhere.get(&resource).cloned().unwrap_or_default();
            let extra: Vec<String> = verbs.into_iter().filter(|v| !base.contains(v)).collect();
            if !extra.is_empty() {
                rights.insert((resource, scope.to_string()), extra.join(", "));
            }
        }
    }
    rights
}

/// The table after `<!-- permissions: <account> -->` in the README:
/// `| resource | verbs | scope |` rows.
fn documented(readme: &str, account: &str) -> Rights {
    let marker = format!("<!-- permissions: {account} -->");
    let start = readme
        .find(&marker)
        .unwrap_or_else(|| panic!("README has no `{marker}` table"));
    readme[start + marker.len()..]
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<String> = row
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().replace('`', ""))
                .collect();
            let mut verbs: Vec<&str> = cells[1].split(", ").collect();
            verbs.sort();
            ((cells[0].clone(), cells[2].clone()), verbs.join(", "))
        })
        .collect()
}

#[test]
fn can_i_lists_are_parsed_into_resources_and_sorted_verbs() {
    let text = concat!(
        "Resources   Non-Resource URLs   Resource Names   Verbs\n",
        "events      []                  []               [create patch update]\n",
        "selfsubjectreviews.authentication.k8s.io   []   []   [create]\n",
        "*.*         []                  []               [get list watch]\n",
        "secrets     []                  [cluster-token]  [get create patch]\n",
        "namespaces  []                  [kube-system clusternet-system]   [get]\n",
        "            [/healthz]          []               [get]\n",
    );
    let got = parse_can_i(text);
    assert_eq!(
        got.get("events").unwrap(),
        &vec!["create", "patch", "update"]
    );
    assert_eq!(got.get("*.*").unwrap(), &vec!["get", "list", "watch"]);
    assert_eq!(
        got.get("secrets named cluster-token").unwrap(),
        &vec!["create", "get", "patch"]
    );
    assert_eq!(
        got.get("namespaces named clusternet-system, kube-system")
            .unwrap(),
        &vec!["get"]
    );
    assert_eq!(got.len(), 4, "{got:?}");
    let readme = "<!-- permissions: x -->\n\n| resource | verbs | scope |\n|---|---|---|\n| `events` | update, create | all namespaces |\n| `secrets` named `cluster-token` | get | all namespaces |\n\nafter";
    assert_eq!(
        documented(readme, "x"),
        Rights::from([
            (
                ("events".to_string(), "all namespaces".to_string()),
                "create, update".to_string()
            ),
            (
                (
                    "secrets named cluster-token".to_string(),
                    "all namespaces".to_string()
                ),
                "get".to_string()
            )
        ])
    );
}

#[tokio::test]
async fn every_component_has_exactly_the_permissions_the_readme_documents() {
    let Some(fleet) = fleet("permissions").await else {
        return;
    };
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let cases = [
        (&fleet.parent, "atoll-scheduler", "atoll-scheduler", None),
        (&fleet.parent, "atoll-hub", "atoll-hub", None),
        (fleet.child("child-1"), "atoll-agent", "atoll-agent", None),
        (
            fleet.child("child-2"),
            "atoll-agent",
            "atoll-agent (namespaced)",
            Some(LISTED),
        ),
    ];
    let mut wrong = Vec::new();
    for (kubectl, account, table, listed) in cases {
        let got = effective(kubectl, account, listed).await;
        let want = documented(&readme, table);
        if got != want {
            let rows = |r: &Rights| {
                r.iter()
                    .map(|((res, scope), verbs)| {
                        let res = match res.split_once(" named ") {
                            Some((r, names)) => format!("`{r}` named `{names}`"),
                            None => format!("`{res}`"),
                        };
                        format!("| {res} | {verbs} | {scope} |")
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            wrong.push(format!(
                "{table}: the README documents\n{}\nbut the API server grants\n{}",
                rows(&want),
                rows(&got)
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[tokio::test]
async fn the_hub_writes_cluster_token_secrets_only_in_dedicated_namespaces_and_only_opaque() {
    let Some(fleet) = fleet("hub secrets").await else {
        return;
    };
    let k = &fleet.parent;
    let dedicated = fleet.dedicated_namespace("child-1");
    let hub = |mut args: Vec<String>| {
        args.push(HUB.to_string());
        args
    };
    let mut args = hub(apply_args(
        &fleet,
        "own",
        &token_secret(&dedicated, "Opaque"),
    ));
    let own: Vec<&str> = args.iter().map(String::as_str).collect();
    allowed(k, "the cluster-token Secret of a dedicated namespace", &own).await;
    for ns in ["kube-system", "default", "clusternet-system"] {
        args = hub(apply_args(&fleet, ns, &token_secret(ns, "Opaque")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let e = refused(k, &format!("a cluster-token Secret in {ns}"), &args).await;
        assert!(e.contains("atoll-hub-secrets"), "{ns}: {e}");
    }
    // The escalation the policy is for: a ServiceAccount token Secret the hub could read back.
    // In a dedicated namespace without a cluster-token yet (a Secret's type cannot change).
    let fresh = "clusternet-perm1";
    fleet
        .apply(
            "fresh-ns",
            &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {fresh}\n  labels:\n    clusters.clusternet.io/cluster-id: perm\n    clusternet.io/created-by: clusternet-hub\n"),
        )
        .await
        .unwrap();
    args = hub(apply_args(&fleet, "fresh", &token_secret(fresh, "Opaque")));
    let fresh_own: Vec<&str> = args.iter().map(String::as_str).collect();
    allowed(
        k,
        "a new cluster-token Secret in a dedicated namespace",
        &fresh_own,
    )
    .await;
    args = hub(apply_args(
        &fleet,
        "sa-token",
        &token_secret(fresh, "kubernetes.io/service-account-token"),
    ));
    let sa_token: Vec<&str> = args.iter().map(String::as_str).collect();
    let e = refused(k, "a service-account-token Secret", &sa_token).await;
    assert!(e.contains("only Secrets of type Opaque"), "{e}");
    // Any other Secret name is refused by RBAC already.
    for ns in ["kube-system", "default", dedicated.as_str()] {
        refused(
            k,
            &format!("another Secret in {ns}"),
            &[
                "create",
                "secret",
                "generic",
                "other",
                "-n",
                ns,
                "--from-literal=a=b",
                "--dry-run=server",
                HUB,
            ],
        )
        .await;
    }
    refused(
        k,
        "listing Secrets outside clusternet-system",
        &["get", "secrets", "-n", "kube-system", HUB],
    )
    .await;
}

#[tokio::test]
async fn the_hub_cannot_patch_namespaces_or_create_any_but_dedicated_ones() {
    let Some(fleet) = fleet("hub namespaces").await else {
        return;
    };
    let k = &fleet.parent;
    let dedicated = fleet.dedicated_namespace("child-1");
    for ns in ["default", "kube-system", dedicated.as_str()] {
        refused(
            k,
            &format!("labelling namespace {ns}"),
            &[
                "label",
                "namespace",
                ns,
                "clusters.clusternet.io/cluster-id=x",
                "--dry-run=server",
                HUB,
            ],
        )
        .await;
    }
    let e = refused(
        k,
        "creating a namespace that is not a dedicated one",
        &["create", "namespace", "team-a", "--dry-run=server", HUB],
    )
    .await;
    assert!(e.contains("atoll-hub-namespaces"), "{e}");
    let path = fleet.tmp.path().join("dedicated-ns.yaml");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: clusternet-zz9zz\n  labels:\n    clusters.clusternet.io/cluster-id: x\n    clusternet.io/created-by: clusternet-hub\n",
    )
    .unwrap();
    allowed(
        k,
        "creating a dedicated namespace",
        &[
            "create",
            "-f",
            path.to_str().unwrap(),
            "--dry-run=server",
            HUB,
        ],
    )
    .await;
}

const SUBSCRIPTION: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: e2e-perm}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: e2e-perm}
data: {color: blue}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: perm, namespace: e2e-perm}
spec:
  subscribers: [{clusterAffinity: {matchLabels: {clusters.clusternet.io/cluster-name: child-1}}}]
  feeds:
    - {apiVersion: v1, kind: Namespace, name: e2e-perm}
    - {apiVersion: v1, kind: ConfigMap, name: settings, namespace: e2e-perm}
"#;

#[tokio::test]
async fn the_hub_may_change_a_descriptions_finalizers_but_not_its_spec_labels_or_annotations() {
    let Some(fleet) = fleet("hub descriptions").await else {
        return;
    };
    let k = &fleet.parent;
    let ns = fleet.dedicated_namespace("child-1");
    fleet.apply("perm", SUBSCRIPTION).await.unwrap();
    let desc = "e2e-perm.perm";
    // The hub's own finalizer patch went through: its finalizer is on the Description.
    support::POLL
        .eventually_timed(
            "the hub's finalizer on the Description",
            Duration::from_secs(60),
            || async {
                let f = k
                    .run(&[
                        "get",
                        "description",
                        desc,
                        "-n",
                        &ns,
                        "-o",
                        "jsonpath={.metadata.finalizers}",
                    ])
                    .await
                    .map_err(|e| e.to_string())?;
                if f.contains(atoll_crds::known::FINALIZER) {
                    Ok(())
                } else {
                    Err(f)
                }
            },
        )
        .await;
    let patch = |p: &'static str| {
        vec![
            "patch",
            "description",
            desc,
            "-n",
            &ns,
            "--type=merge",
            "-p",
            p,
            "--dry-run=server",
            HUB,
        ]
    };
    for (what, p) in [
        ("spec", r#"{"spec":{"raw":[]}}"#),
        ("labels", r#"{"metadata":{"labels":{"x":"y"}}}"#),
        ("annotations", r#"{"metadata":{"annotations":{"x":"y"}}}"#),
    ] {
        let e = refused(
            k,
            &format!("the hub changing a Description's {what}"),
            &patch(p),
        )
        .await;
        assert!(e.contains("atoll-hub-descriptions"), "{what}: {e}");
    }
    allowed(
        k,
        "the hub adding a finalizer",
        &patch(r#"{"metadata":{"finalizers":["apps.clusternet.io/finalizer","example.com/x"]}}"#),
    )
    .await;
    allowed(
        k,
        "the hub writing Description status",
        &[
            "patch",
            "description",
            desc,
            "-n",
            &ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"reason":"x"}}"#,
            "--dry-run=server",
            HUB,
        ],
    )
    .await;
    refused(
        k,
        "the hub deleting a Description",
        &[
            "delete",
            "description",
            desc,
            "-n",
            &ns,
            "--dry-run=server",
            HUB,
        ],
    )
    .await;
    fleet.delete("perm").await;
}

#[tokio::test]
async fn the_narrower_agent_role_writes_only_in_the_namespaces_it_lists() {
    let Some(fleet) = fleet("narrower agent").await else {
        return;
    };
    let k = fleet.child("child-2");
    allowed(
        k,
        "a ConfigMap in the listed namespace",
        &[
            "create",
            "configmap",
            "x",
            "-n",
            LISTED,
            "--dry-run=server",
            AGENT,
        ],
    )
    .await;
    allowed(
        k,
        "its inventory in clusternet-system",
        &[
            "create",
            "configmap",
            "x",
            "-n",
            "clusternet-system",
            "--dry-run=server",
            AGENT,
        ],
    )
    .await;
    for (what, args) in [
        (
            "a ConfigMap in default",
            vec![
                "create",
                "configmap",
                "x",
                "-n",
                "default",
                "--dry-run=server",
                AGENT,
            ],
        ),
        (
            "a Deployment in kube-system",
            vec![
                "create",
                "deployment",
                "x",
                "--image=x",
                "-n",
                "kube-system",
                "--dry-run=server",
                AGENT,
            ],
        ),
        (
            "a namespace",
            vec!["create", "namespace", "x", "--dry-run=server", AGENT],
        ),
        (
            "a ClusterRole",
            vec![
                "create",
                "clusterrole",
                "x",
                "--verb=get",
                "--resource=pods",
                "--dry-run=server",
                AGENT,
            ],
        ),
        (
            "reading Secrets in kube-system",
            vec!["get", "secrets", "-n", "kube-system", AGENT],
        ),
        (
            "another Secret in clusternet-system",
            vec![
                "create",
                "secret",
                "generic",
                "x",
                "-n",
                "clusternet-system",
                "--dry-run=server",
                AGENT,
            ],
        ),
    ] {
        refused(k, &format!("the narrower agent: {what}"), &args).await;
    }
    // The default install of child-1 may do all of it.
    allowed(
        fleet.child("child-1"),
        "the default agent: a namespace",
        &["create", "namespace", "x", "--dry-run=server", AGENT],
    )
    .await;
}

const NARROW_SUBSCRIPTION: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: inside, namespace: shop}
data: {color: blue}
---
apiVersion: v1
kind: Namespace
metadata: {name: e2e-outside}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: outside, namespace: e2e-outside}
data: {color: red}
---
# A Subscription in shop may use a feed of e2e-outside only with a grant there.
apiVersion: apps.atoll.dev/v1alpha1
kind: FeedGrant
metadata: {name: shop-may-use-outside, namespace: e2e-outside}
spec:
  from: [{namespace: shop}]
  to: [{group: "", kind: ConfigMap, name: outside}]
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: narrow, namespace: shop}
spec:
  subscribers: [{clusterAffinity: {matchLabels: {clusters.clusternet.io/cluster-name: child-2}}}]
  feeds:
    - {apiVersion: v1, kind: ConfigMap, name: inside, namespace: shop}
    - {apiVersion: v1, kind: ConfigMap, name: outside, namespace: e2e-outside}
"#;

/// The fleet's agent of child-2 runs without `--namespaces` (the flag's own refusal is pinned
/// in `applier/tests/applier.rs`), so here the API server's 403 is what it meets.
#[tokio::test]
async fn an_agent_denied_an_object_reports_it_in_the_description_and_applies_the_rest() {
    let Some(fleet) = fleet("narrower agent reports").await else {
        return;
    };
    let ns = fleet.dedicated_namespace("child-2");
    fleet.apply("narrow", NARROW_SUBSCRIPTION).await.unwrap();
    let (reason, _) = support::POLL
        .eventually_timed(
            "the Description of child-2 to report the forbidden object",
            Duration::from_secs(60),
            || async {
                let out = fleet
                    .parent
                    .run(&[
                        "get",
                        "description",
                        "shop.narrow",
                        "-n",
                        &ns,
                        "-o",
                        "jsonpath={.status.phase} {.status.reason}",
                    ])
                    .await
                    .map_err(|e| e.to_string())?;
                if out.starts_with("Failure ") {
                    Ok(out)
                } else {
                    Err(out)
                }
            },
        )
        .await;
    assert!(
        reason.contains("ConfigMap e2e-outside/outside") && reason.contains("forbidden"),
        "{reason}"
    );
    assert!(!reason.contains("shop/inside"), "{reason}");
    let child = fleet.child("child-2");
    allowed(
        child,
        "the allowed object applied",
        &["get", "configmap", "inside", "-n", LISTED],
    )
    .await;
    let ready = support::clusters_ready(&fleet).await.unwrap();
    assert!(
        ready.contains("child-2=True"),
        "the agent keeps running: {ready}"
    );
    fleet.delete("narrow").await;
}
