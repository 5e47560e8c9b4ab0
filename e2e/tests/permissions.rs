#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! What each atoll component may do, as the real kube-apiserver's RBAC says
//! (`kubectl auth can-i --list --as=system:serviceaccount:clusternet-system:<account>`), equals
//! what the README's "Permissions" section documents. Runs on the real tier only
//! (`FLEET_BACKEND=kube`): devcluster authorizes every request.
//!
//! Rights every authenticated user has (discovery, health, self reviews) are left out on both
//! sides. A row's scope "all namespaces" means the verbs hold in a namespace other than
//! `clusternet-system` too (a ClusterRole); "clusternet-system" lists the verbs granted there on
//! top of those (a Role).

mod support;

use std::collections::BTreeMap;

use atoll_e2e::kubectl::Kubectl;
use atoll_e2e::plan::Backend;
use support::Fleet;

/// (resource, scope) -> verbs, as compared.
type Rights = BTreeMap<(String, String), String>;

const EVERYONE: [&str; 4] = [
    "selfsubjectreviews.authentication.k8s.io",
    "selfsubjectaccessreviews.authorization.k8s.io",
    "selfsubjectrulesreviews.authorization.k8s.io",
    // Readable by every authenticated user in newer Kubernetes (seen on v1.37.2, not v1.33).
    "clustertrustbundles.certificates.k8s.io",
];

/// `resource -> sorted verbs` from `kubectl auth can-i --list` (resource rows only).
fn parse_can_i(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().skip(1) {
        if line.starts_with(' ') || line.trim().is_empty() {
            continue; // a non-resource URL
        }
        let resource = line.split_whitespace().next().unwrap_or_default();
        if EVERYONE.contains(&resource) || resource.starts_with('[') {
            continue;
        }
        // `[non-resource URLs] [resource names] [verbs]`
        let groups: Vec<&str> = line
            .split('[')
            .skip(1)
            .map(|g| g.split(']').next().unwrap_or_default().trim())
            .collect();
        let verbs = groups.last().copied().unwrap_or_default();
        let names = groups.len().checked_sub(2).map_or("", |i| groups[i]);
        let key = if names.is_empty() {
            resource.to_string()
        } else {
            format!(
                "{resource} named {}",
                names.split_whitespace().collect::<Vec<_>>().join(", ")
            )
        };
        let entry = out.entry(key).or_default();
        entry.extend(verbs.split_whitespace().map(str::to_string));
        entry.sort();
        entry.dedup();
    }
    out
}

async fn effective(k: &Kubectl, account: &str) -> Rights {
    let who = format!("--as=system:serviceaccount:clusternet-system:{account}");
    let list = |ns: &'static str| {
        let who = who.clone();
        async move {
            parse_can_i(
                &k.run(&["auth", "can-i", "--list", &who, "-n", ns])
                    .await
                    .unwrap(),
            )
        }
    };
    let home = list("clusternet-system").await;
    let elsewhere = list("default").await;
    let mut rights = Rights::new();
    for (resource, verbs) in home {
        let everywhere = elsewhere.get(&resource).cloned().unwrap_or_default();
        let only_home: Vec<String> = verbs
            .into_iter()
            .filter(|v| !everywhere.contains(v))
            .collect();
        for (scope, verbs) in [
            ("all namespaces", everywhere),
            ("clusternet-system", only_home),
        ] {
            if !verbs.is_empty() {
                rights.insert((resource.clone(), scope.to_string()), verbs.join(", "));
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
        "secrets     []                  [cluster-token]  [list watch]\n",
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
        &vec!["list", "watch"]
    );
    assert_eq!(got.len(), 3, "{got:?}");
    let readme = "<!-- permissions: x -->\n\n| resource | verbs | scope |\n|---|---|---|\n| `events` | update, create | all namespaces |\n\nafter";
    assert_eq!(
        documented(readme, "x"),
        Rights::from([(
            ("events".to_string(), "all namespaces".to_string()),
            "create, update".to_string()
        )])
    );
}

#[tokio::test]
async fn every_component_has_exactly_the_permissions_the_readme_documents() {
    if support::backend() != Backend::Kube {
        eprintln!(
            "NOTICE: permissions skipped: RBAC needs the real tier (FLEET_BACKEND=kube runs it)"
        );
        return;
    }
    if !support::prerequisites_or_skip("permissions").await {
        return;
    }
    let fleet = Fleet::up(1, &[], &[]).await;
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let cases = [
        (&fleet.parent, "atoll-scheduler"),
        (&fleet.parent, "atoll-hub"),
        (fleet.child("child-1"), "atoll-agent"),
    ];
    let mut wrong = Vec::new();
    for (kubectl, account) in cases {
        let got = effective(kubectl, account).await;
        let want = documented(&readme, account);
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
                "{account}: the README documents\n{}\nbut the API server grants\n{}",
                rows(&want),
                rows(&got)
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}
