//! The built-in resources devcluster serves, as kube-apiserver 1.32 advertises them.
//!
//! Verbs, short names, categories and subresources follow the real discovery documents
//! (`api/discovery/*.json` of kubernetes v1.32). Table columns follow
//! `pkg/printers/internalversion/printers.go`. For built-ins `printer_columns` is the
//! **complete** column list, `Name` included (Event puts it last, wide only); an empty list
//! means the default convertor (`Name`, `Created At`).
//!
//! Cells that a JSONPath cannot express use a computed form `#function` or
//! `#function:arg1;arg2`, evaluated by [`crate::api::table`]. Arguments are JSONPaths:
//!
//! | form | cell |
//! |---|---|
//! | `#age:P` | relative age of the timestamp at `P` (`5m`), `<unknown>` if missing |
//! | `#age-or-none:P` | relative age, `<none>` if missing |
//! | `#timestamp:P` | the RFC 3339 string at `P` (default convertor `Created At`) |
//! | `#int0:P` | integer at `P`, 0 if missing (`P|N`: N if missing, for API defaults) |
//! | `#ratio:P;Q` | `"a/b"` from the integers at `P` and `Q` (missing = 0, or `P|N` as above) |
//! | `#count:P;Q…` | summed element counts of the maps/arrays at the paths |
//! | `#none:P` | the value(s) at `P` joined with `,`, `<none>` if empty |
//! | `#first:P;Q…` | the first non-empty value among the paths, `""` if none |
//! | `#bool:P` | `True`/`False` (missing = `False`) |
//! | `#selector:P` | a LabelSelector or string map as `k=v,k in (a,b)`, `<none>` if empty |
//! | `#subjects:Kind` | RBAC subjects of that kind joined with `, ` (`ns/name` for ServiceAccount) |
//! | `#role-ref` | `Kind/name` of `roleRef` |
//! | `#pod-ready`, `#pod-status`, `#pod-restarts`, `#pod-readiness-gates` | pod printer cells |
//! | `#svc-external-ip`, `#svc-ports` | service printer cells |
//! | `#node-status`, `#node-roles`, `#node-address:Type` | node printer cells |
//! | `#job-status`, `#job-completions`, `#job-duration` | job printer cells |
//! | `#event-last-seen`, `#event-first-seen`, `#event-object`, `#event-source`, `#event-count` | event printer cells (both event APIs) |

use super::resource::{ALL_VERBS, PrinterColumn, ResourceInfo, ScaleSubresource};

/// Column description of `Name`, as the real printers word it.
pub const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// Column description of `Age`, as the real printers word it.
pub const AGE_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// Every built-in resource, in a stable order (core first, then groups in priority order).
pub fn builtin_resources() -> Vec<ResourceInfo> {
    let workload_wide = |prefix: &str| -> Vec<PrinterColumn> {
        vec![
            col(
                "Containers",
                "string",
                "Names of each container in the template.",
                1,
                &format!("#none:{prefix}.containers[*].name"),
            ),
            col(
                "Images",
                "string",
                "Images referenced by each container in the template.",
                1,
                &format!("#none:{prefix}.containers[*].image"),
            ),
        ]
    };
    let selector = |path: &str| {
        col(
            "Selector",
            "string",
            "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
            1,
            &format!("#selector:{path}"),
        )
    };

    let mut out = Vec::new();

    // ---- core/v1 ----
    let mut ns = base("", "v1", "Namespace", "namespaces", false);
    ns.verbs = verbs(&[
        "create", "delete", "get", "list", "patch", "update", "watch",
    ]);
    ns.short_names = strings(&["ns"]);
    ns.status_subresource = true;
    ns.printer_columns = vec![
        name_col(),
        col(
            "Status",
            "string",
            "The status of the namespace",
            0,
            ".status.phase",
        ),
        age_col(),
    ];
    out.push(ns);

    let mut cm = base("", "v1", "ConfigMap", "configmaps", true);
    cm.short_names = strings(&["cm"]);
    cm.printer_columns = vec![
        name_col(),
        col(
            "Data",
            "string",
            "Data contains the configuration data.",
            0,
            "#count:.data;.binaryData",
        ),
        age_col(),
    ];
    out.push(cm);

    let mut secret = base("", "v1", "Secret", "secrets", true);
    secret.printer_columns = vec![
        name_col(),
        col("Type", "string", "The type of the secret", 0, ".type"),
        col(
            "Data",
            "string",
            "The number of entries in the secret",
            0,
            "#count:.data",
        ),
        age_col(),
    ];
    out.push(secret);

    let mut sa = base("", "v1", "ServiceAccount", "serviceaccounts", true);
    sa.short_names = strings(&["sa"]);
    sa.printer_columns = vec![
        name_col(),
        col(
            "Secrets",
            "string",
            "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
            0,
            "#count:.secrets",
        ),
        age_col(),
    ];
    out.push(sa);

    let mut svc = base("", "v1", "Service", "services", true);
    svc.short_names = strings(&["svc"]);
    svc.categories = strings(&["all"]);
    svc.status_subresource = true;
    svc.printer_columns = vec![
        name_col(),
        col(
            "Type",
            "string",
            "The type of the service.",
            0,
            ".spec.type",
        ),
        col(
            "Cluster-IP",
            "string",
            "The cluster ip of the service.",
            0,
            ".spec.clusterIP",
        ),
        col(
            "External-IP",
            "string",
            "The external ip of the service.",
            0,
            "#svc-external-ip",
        ),
        col(
            "Port(s)",
            "string",
            "The ports of the service.",
            0,
            "#svc-ports",
        ),
        age_col(),
        col(
            "Selector",
            "string",
            "Route service traffic to pods with label keys and values matching this selector.",
            1,
            "#selector:.spec.selector",
        ),
    ];
    out.push(svc);

    let event_columns = vec![
        col(
            "Last Seen",
            "string",
            "The last time this event was seen.",
            0,
            "#event-last-seen",
        ),
        col(
            "Type",
            "string",
            "Type of this event (Normal, Warning), new types could be added in the future.",
            0,
            ".type",
        ),
        col(
            "Reason",
            "string",
            "This should be a short, machine understandable string that gives the reason for this event being generated.",
            0,
            ".reason",
        ),
        col(
            "Object",
            "string",
            "The object this Event is about.",
            0,
            "#event-object",
        ),
        col(
            "Subobject",
            "string",
            "The subobject this Event is about.",
            1,
            "#first:.involvedObject.fieldPath;.regarding.fieldPath",
        ),
        col(
            "Source",
            "string",
            "The component reporting this event.",
            1,
            "#event-source",
        ),
        col(
            "Message",
            "string",
            "A human-readable description of the status of this operation.",
            0,
            "#first:.message;.note",
        ),
        col(
            "First Seen",
            "string",
            "The first time this event was seen.",
            1,
            "#event-first-seen",
        ),
        col(
            "Count",
            "integer",
            "The number of times this event has occurred.",
            1,
            "#event-count",
        ),
        PrinterColumn {
            priority: 1,
            ..name_col()
        },
    ];
    let mut ev = base("", "v1", "Event", "events", true);
    ev.short_names = strings(&["ev"]);
    ev.printer_columns = event_columns.clone();
    out.push(ev);

    let mut node = base("", "v1", "Node", "nodes", false);
    node.short_names = strings(&["no"]);
    node.status_subresource = true;
    node.printer_columns = vec![
        name_col(),
        col(
            "Status",
            "string",
            "The status of the node",
            0,
            "#node-status",
        ),
        col("Roles", "string", "The roles of the node", 0, "#node-roles"),
        age_col(),
        col(
            "Version",
            "string",
            "Kubelet Version reported by the node.",
            0,
            ".status.nodeInfo.kubeletVersion",
        ),
        col(
            "Internal-IP",
            "string",
            "List of addresses reachable to the node. Queried from cloud provider, if available.",
            1,
            "#node-address:InternalIP",
        ),
        col(
            "External-IP",
            "string",
            "List of addresses reachable to the node. Queried from cloud provider, if available.",
            1,
            "#node-address:ExternalIP",
        ),
        col(
            "OS-Image",
            "string",
            "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
            1,
            ".status.nodeInfo.osImage",
        ),
        col(
            "Kernel-Version",
            "string",
            "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            1,
            ".status.nodeInfo.kernelVersion",
        ),
        col(
            "Container-Runtime",
            "string",
            "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
            1,
            ".status.nodeInfo.containerRuntimeVersion",
        ),
    ];
    out.push(node);

    let mut pod = base("", "v1", "Pod", "pods", true);
    pod.short_names = strings(&["po"]);
    pod.categories = strings(&["all"]);
    pod.status_subresource = true;
    pod.printer_columns = vec![
        name_col(),
        col(
            "Ready",
            "string",
            "The aggregate readiness state of this pod for accepting traffic.",
            0,
            "#pod-ready",
        ),
        col(
            "Status",
            "string",
            "The aggregate status of the containers in this pod.",
            0,
            "#pod-status",
        ),
        col(
            "Restarts",
            "string",
            "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            0,
            "#pod-restarts",
        ),
        age_col(),
        col(
            "IP",
            "string",
            "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
            1,
            "#none:.status.podIP",
        ),
        col(
            "Node",
            "string",
            "NodeName is a request to schedule this pod onto a specific node.",
            1,
            "#none:.spec.nodeName",
        ),
        col(
            "Nominated Node",
            "string",
            "nominatedNodeName is set when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.",
            1,
            "#none:.status.nominatedNodeName",
        ),
        col(
            "Readiness Gates",
            "string",
            "If specified, all readiness gates will be evaluated for pod readiness.",
            1,
            "#pod-readiness-gates",
        ),
    ];
    out.push(pod);

    // ---- apps/v1 ----
    let mut deploy = base("apps", "v1", "Deployment", "deployments", true);
    deploy.short_names = strings(&["deploy"]);
    deploy.categories = strings(&["all"]);
    deploy.status_subresource = true;
    deploy.scale = Some(builtin_scale());
    deploy.has_generation = true;
    deploy.printer_columns = [
        vec![
            name_col(),
            col(
                "Ready",
                "string",
                "Number of the pod with ready state",
                0,
                "#ratio:.status.readyReplicas;.spec.replicas|1",
            ),
            col(
                "Up-to-date",
                "string",
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                0,
                "#int0:.status.updatedReplicas",
            ),
            col(
                "Available",
                "string",
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                0,
                "#int0:.status.availableReplicas",
            ),
            age_col(),
        ],
        workload_wide(".spec.template.spec"),
        vec![selector(".spec.selector")],
    ]
    .concat();
    out.push(deploy);

    let mut sts = base("apps", "v1", "StatefulSet", "statefulsets", true);
    sts.short_names = strings(&["sts"]);
    sts.categories = strings(&["all"]);
    sts.status_subresource = true;
    sts.scale = Some(builtin_scale());
    sts.has_generation = true;
    sts.printer_columns = [
        vec![
            name_col(),
            col(
                "Ready",
                "string",
                "Number of the pod with ready state",
                0,
                "#ratio:.status.readyReplicas;.spec.replicas|1",
            ),
            age_col(),
        ],
        workload_wide(".spec.template.spec"),
    ]
    .concat();
    out.push(sts);

    let mut ds = base("apps", "v1", "DaemonSet", "daemonsets", true);
    ds.short_names = strings(&["ds"]);
    ds.categories = strings(&["all"]);
    ds.status_subresource = true;
    ds.has_generation = true;
    ds.printer_columns = [
        vec![
            name_col(),
            col(
                "Desired",
                "integer",
                "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).",
                0,
                "#int0:.status.desiredNumberScheduled",
            ),
            col(
                "Current",
                "integer",
                "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
                0,
                "#int0:.status.currentNumberScheduled",
            ),
            col(
                "Ready",
                "integer",
                "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
                0,
                "#int0:.status.numberReady",
            ),
            col(
                "Up-to-date",
                "integer",
                "The total number of nodes that are running updated daemon pod",
                0,
                "#int0:.status.updatedNumberScheduled",
            ),
            col(
                "Available",
                "integer",
                "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
                0,
                "#int0:.status.numberAvailable",
            ),
            col(
                "Node Selector",
                "string",
                "NodeSelector is a selector which must be true for the pod to fit on a node.",
                0,
                "#selector:.spec.template.spec.nodeSelector",
            ),
            age_col(),
        ],
        workload_wide(".spec.template.spec"),
        vec![selector(".spec.selector")],
    ]
    .concat();
    out.push(ds);

    let mut rs = base("apps", "v1", "ReplicaSet", "replicasets", true);
    rs.short_names = strings(&["rs"]);
    rs.categories = strings(&["all"]);
    rs.status_subresource = true;
    rs.scale = Some(builtin_scale());
    rs.has_generation = true;
    rs.printer_columns = [
        vec![
            name_col(),
            col(
                "Desired",
                "integer",
                "Number of desired pods.",
                0,
                "#int0:.spec.replicas|1",
            ),
            col(
                "Current",
                "integer",
                "Replicas is the most recently observed number of replicas.",
                0,
                "#int0:.status.replicas",
            ),
            col(
                "Ready",
                "integer",
                "The number of ready replicas for this replica set.",
                0,
                "#int0:.status.readyReplicas",
            ),
            age_col(),
        ],
        workload_wide(".spec.template.spec"),
        vec![selector(".spec.selector")],
    ]
    .concat();
    out.push(rs);

    // ---- events.k8s.io/v1 ----
    let mut ev2 = base("events.k8s.io", "v1", "Event", "events", true);
    ev2.short_names = strings(&["ev"]);
    ev2.printer_columns = event_columns;
    out.push(ev2);

    // ---- batch/v1 ----
    let mut job = base("batch", "v1", "Job", "jobs", true);
    job.categories = strings(&["all"]);
    job.status_subresource = true;
    job.has_generation = true;
    job.printer_columns = [
        vec![
            name_col(),
            col("Status", "string", "Status of the job.", 0, "#job-status"),
            col(
                "Completions",
                "string",
                "The completion status of the job.",
                0,
                "#job-completions",
            ),
            col(
                "Duration",
                "string",
                "Time required to complete the job.",
                0,
                "#job-duration",
            ),
            age_col(),
        ],
        workload_wide(".spec.template.spec"),
        vec![selector(".spec.selector")],
    ]
    .concat();
    out.push(job);

    let mut cj = base("batch", "v1", "CronJob", "cronjobs", true);
    cj.short_names = strings(&["cj"]);
    cj.categories = strings(&["all"]);
    cj.status_subresource = true;
    cj.has_generation = true;
    cj.printer_columns = [
        vec![
            name_col(),
            col(
                "Schedule",
                "string",
                "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
                0,
                ".spec.schedule",
            ),
            col(
                "Timezone",
                "string",
                "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
                0,
                "#none:.spec.timeZone",
            ),
            col(
                "Suspend",
                "boolean",
                "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.",
                0,
                "#bool:.spec.suspend",
            ),
            col(
                "Active",
                "integer",
                "A list of pointers to currently running jobs.",
                0,
                "#count:.status.active",
            ),
            col(
                "Last Schedule",
                "string",
                "Information when was the last time the job was successfully scheduled.",
                0,
                "#age-or-none:.status.lastScheduleTime",
            ),
            age_col(),
        ],
        workload_wide(".spec.jobTemplate.spec.template.spec"),
        vec![selector(".spec.jobTemplate.spec.selector")],
    ]
    .concat();
    out.push(cj);

    // ---- rbac.authorization.k8s.io/v1 ----
    let rbac = "rbac.authorization.k8s.io";
    let binding_columns = vec![
        name_col(),
        col(
            "Role",
            "string",
            "Role is the name of the role this binding references.",
            0,
            "#role-ref",
        ),
        age_col(),
        col(
            "Users",
            "string",
            "Users in the roleBinding",
            1,
            "#subjects:User",
        ),
        col(
            "Groups",
            "string",
            "Groups in the roleBinding",
            1,
            "#subjects:Group",
        ),
        col(
            "ServiceAccounts",
            "string",
            "ServiceAccounts in the roleBinding",
            1,
            "#subjects:ServiceAccount",
        ),
    ];
    let created_at = vec![name_col(), created_at_col()];
    let mut cr = base(rbac, "v1", "ClusterRole", "clusterroles", false);
    cr.printer_columns = created_at.clone();
    out.push(cr);
    let mut crb = base(
        rbac,
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    );
    crb.printer_columns = binding_columns.clone();
    out.push(crb);
    let mut role = base(rbac, "v1", "Role", "roles", true);
    role.printer_columns = created_at;
    out.push(role);
    let mut rb = base(rbac, "v1", "RoleBinding", "rolebindings", true);
    rb.printer_columns = binding_columns;
    out.push(rb);

    // ---- apiextensions.k8s.io/v1 ----
    let mut crd = base(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    );
    crd.short_names = strings(&["crd", "crds"]);
    crd.categories = strings(&["api-extensions"]);
    crd.status_subresource = true;
    crd.has_generation = true;
    out.push(crd);

    // ---- admissionregistration.k8s.io/v1 (stored only: devcluster enforces no admission) ----
    let mut vap = base(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        false,
    );
    vap.status_subresource = true;
    vap.has_generation = true;
    vap.printer_columns = vec![name_col(), age_col()];
    out.push(vap);
    let mut vapb = base(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        false,
    );
    vapb.has_generation = true;
    vapb.printer_columns = vec![name_col(), age_col()];
    out.push(vapb);

    // ---- coordination.k8s.io/v1 ----
    let mut lease = base("coordination.k8s.io", "v1", "Lease", "leases", true);
    lease.printer_columns = vec![
        name_col(),
        col(
            "Holder",
            "string",
            "The holder of the lease",
            0,
            ".spec.holderIdentity",
        ),
        age_col(),
    ];
    out.push(lease);

    out
}

/// The priority order of API groups in `/apis`, as kube-apiserver 1.32 lists them. Groups not
/// listed (CRD groups) follow, sorted by name.
pub const GROUP_PRIORITY: &[&str] = &[
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
    "flowcontrol.apiserver.k8s.io",
];

fn base(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> ResourceInfo {
    ResourceInfo {
        group: group.to_string(),
        version: version.to_string(),
        kind: kind.to_string(),
        plural: plural.to_string(),
        singular: kind.to_lowercase(),
        namespaced,
        short_names: Vec::new(),
        categories: Vec::new(),
        verbs: verbs(ALL_VERBS),
        status_subresource: false,
        scale: None,
        printer_columns: Vec::new(),
        schema: None,
        builtin: true,
        has_generation: false,
    }
}

/// The scale subresource of Deployment, StatefulSet and ReplicaSet. Their selector lives in
/// `.spec.selector` as a LabelSelector object (not a string), so `label_selector_path` is `None`;
/// the server serialises the selector itself if it wants `status.selector` in the Scale.
fn builtin_scale() -> ScaleSubresource {
    ScaleSubresource {
        spec_replicas_path: ".spec.replicas".to_string(),
        status_replicas_path: ".status.replicas".to_string(),
        label_selector_path: None,
    }
}

fn verbs(v: &[&str]) -> Vec<String> {
    strings(v)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_string()).collect()
}

fn col(
    name: &str,
    type_: &str,
    description: &str,
    priority: i32,
    json_path: &str,
) -> PrinterColumn {
    PrinterColumn {
        name: name.to_string(),
        type_: type_.to_string(),
        format: String::new(),
        description: description.to_string(),
        priority,
        json_path: json_path.to_string(),
    }
}

/// The `Name` column every table starts with.
pub fn name_col() -> PrinterColumn {
    PrinterColumn {
        format: "name".to_string(),
        ..col("Name", "string", NAME_DESCRIPTION, 0, ".metadata.name")
    }
}

/// The built-in printers' `Age` column (type `string`, a relative duration).
pub fn age_col() -> PrinterColumn {
    col(
        "Age",
        "string",
        AGE_DESCRIPTION,
        0,
        "#age:.metadata.creationTimestamp",
    )
}

/// The default convertor's `Created At` column (type `date`, an RFC 3339 string).
pub fn created_at_col() -> PrinterColumn {
    col(
        "Created At",
        "date",
        AGE_DESCRIPTION,
        0,
        "#timestamp:.metadata.creationTimestamp",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(all: &'a [ResourceInfo], group: &str, plural: &str) -> &'a ResourceInfo {
        all.iter()
            .find(|r| r.group == group && r.plural == plural)
            .unwrap_or_else(|| panic!("{group}/{plural} missing"))
    }

    #[test]
    fn every_required_resource_is_served_once() {
        let all = builtin_resources();
        let wanted = [
            ("", "namespaces", "Namespace", false),
            ("", "configmaps", "ConfigMap", true),
            ("", "secrets", "Secret", true),
            ("", "serviceaccounts", "ServiceAccount", true),
            ("", "services", "Service", true),
            ("", "events", "Event", true),
            ("events.k8s.io", "events", "Event", true),
            ("", "nodes", "Node", false),
            ("", "pods", "Pod", true),
            ("coordination.k8s.io", "leases", "Lease", true),
            ("apps", "deployments", "Deployment", true),
            ("apps", "statefulsets", "StatefulSet", true),
            ("apps", "daemonsets", "DaemonSet", true),
            ("apps", "replicasets", "ReplicaSet", true),
            ("batch", "jobs", "Job", true),
            ("batch", "cronjobs", "CronJob", true),
            ("rbac.authorization.k8s.io", "roles", "Role", true),
            (
                "rbac.authorization.k8s.io",
                "rolebindings",
                "RoleBinding",
                true,
            ),
            (
                "rbac.authorization.k8s.io",
                "clusterroles",
                "ClusterRole",
                false,
            ),
            (
                "rbac.authorization.k8s.io",
                "clusterrolebindings",
                "ClusterRoleBinding",
                false,
            ),
            (
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
            ),
            (
                "admissionregistration.k8s.io",
                "validatingadmissionpolicies",
                "ValidatingAdmissionPolicy",
                false,
            ),
            (
                "admissionregistration.k8s.io",
                "validatingadmissionpolicybindings",
                "ValidatingAdmissionPolicyBinding",
                false,
            ),
        ];
        for (group, plural, kind, namespaced) in wanted {
            let r = find(&all, group, plural);
            assert_eq!(r.kind, kind, "{group}/{plural}");
            assert_eq!(r.namespaced, namespaced, "{group}/{plural}");
            assert!(r.builtin);
            assert_eq!(
                all.iter()
                    .filter(|x| x.group == group && x.plural == plural)
                    .count(),
                1
            );
        }
        assert_eq!(all.len(), wanted.len());
    }

    #[test]
    fn short_names_categories_and_subresources_match_kube_apiserver() {
        let all = builtin_resources();
        // (group, plural, short names, categories, status, scale)
        type Case<'a> = (&'a str, &'a str, &'a [&'a str], &'a [&'a str], bool, bool);
        let cases: &[Case] = &[
            ("", "namespaces", &["ns"], &[], true, false),
            ("", "configmaps", &["cm"], &[], false, false),
            ("", "serviceaccounts", &["sa"], &[], false, false),
            ("", "services", &["svc"], &["all"], true, false),
            ("", "events", &["ev"], &[], false, false),
            ("", "nodes", &["no"], &[], true, false),
            ("", "pods", &["po"], &["all"], true, false),
            ("apps", "deployments", &["deploy"], &["all"], true, true),
            ("apps", "statefulsets", &["sts"], &["all"], true, true),
            ("apps", "daemonsets", &["ds"], &["all"], true, false),
            ("apps", "replicasets", &["rs"], &["all"], true, true),
            ("batch", "jobs", &[], &["all"], true, false),
            ("batch", "cronjobs", &["cj"], &["all"], true, false),
            (
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                &["crd", "crds"],
                &["api-extensions"],
                true,
                false,
            ),
        ];
        for (group, plural, short, cats, status, scale) in cases {
            let r = find(&all, group, plural);
            assert_eq!(r.short_names, strings(short), "{plural}");
            assert_eq!(r.categories, strings(cats), "{plural}");
            assert_eq!(r.status_subresource, *status, "{plural}");
            assert_eq!(r.scale.is_some(), *scale, "{plural}");
        }
    }

    #[test]
    fn generation_is_kept_only_for_spec_status_kinds() {
        let all = builtin_resources();
        for r in &all {
            let expected = matches!(
                r.kind.as_str(),
                "Deployment"
                    | "StatefulSet"
                    | "DaemonSet"
                    | "ReplicaSet"
                    | "Job"
                    | "CronJob"
                    | "CustomResourceDefinition"
                    | "ValidatingAdmissionPolicy"
                    | "ValidatingAdmissionPolicyBinding"
            );
            assert_eq!(r.has_generation, expected, "{}", r.kind);
        }
    }

    #[test]
    fn namespaces_have_no_deletecollection_verb() {
        let all = builtin_resources();
        assert!(
            !find(&all, "", "namespaces")
                .verbs
                .contains(&"deletecollection".to_string())
        );
        assert_eq!(find(&all, "", "configmaps").verbs, strings(ALL_VERBS));
    }

    #[test]
    fn printer_columns_start_with_name_except_events() {
        for r in builtin_resources() {
            let Some(first) = r.printer_columns.first() else {
                continue;
            };
            if r.kind == "Event" {
                assert_eq!(first.name, "Last Seen");
                let last = r
                    .printer_columns
                    .last()
                    .map(|c| (c.name.clone(), c.priority));
                assert_eq!(last, Some(("Name".to_string(), 1)));
            } else {
                assert_eq!(first.name, "Name", "{}", r.kind);
                assert_eq!(first.format, "name");
            }
        }
    }

    #[test]
    fn deployment_columns_follow_the_real_printer() {
        let all = builtin_resources();
        let names: Vec<(String, i32)> = find(&all, "apps", "deployments")
            .printer_columns
            .iter()
            .map(|c| (c.name.clone(), c.priority))
            .collect();
        let want = [
            ("Name", 0),
            ("Ready", 0),
            ("Up-to-date", 0),
            ("Available", 0),
            ("Age", 0),
            ("Containers", 1),
            ("Images", 1),
            ("Selector", 1),
        ];
        let want: Vec<(String, i32)> = want.iter().map(|(n, p)| (n.to_string(), *p)).collect();
        assert_eq!(names, want);
    }
}
