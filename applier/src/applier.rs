//! The applier: puts a Description's objects into a child cluster with server-side apply,
//! prunes what a Description no longer contains, deletes a Description's objects (confirmed
//! once they are gone), keeps an inventory in the child, and reports each object's status.
//!
//! It knows nothing about gRPC, so the hub can reuse it for Push-mode clusters.
//!
//! Field ownership: the agent applies with one field manager and without `force`. When the API
//! server reports a conflict, the agent looks at who owns the field. A manager that declared
//! ownership itself, with server-side apply or through a subresource such as `scale` (how the
//! HPA writes), keeps the field: the agent leaves it alone ("yields"), records it in the
//! inventory and never claims it again for that object. A field changed by a plain update
//! (`kubectl edit`, `kubectl patch`) is drift: the agent forces it back, on objects it owns
//! (applied before, or adopted).

use crate::discovery::{Discovery, Kind};
use crate::fieldpath;
use crate::helm::{self, Helm};
use crate::inventory::{self, Entry, Inventory, ReleaseEntry};
use crate::metrics::Metrics;
use crate::model::{
    ANNOTATION_ADOPT, Description, LABEL_MANAGED_BY, MANAGED_BY_AGENT, ObjectRef, ObjectReport,
    Phase, ReleaseReport, Report, owner_of,
};
use crate::prune::PrunePlan;
use crate::scope::Scope;
use crate::{Error, drift};
use atoll_crds::known::{self, ANNOTATION_OWNED_BY_DESCRIPTION};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{self, UnboundedReceiver};

/// How many objects are applied at once.
const CONCURRENCY: usize = 16;
/// How long a new CRD may take to become Established.
const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the applier remembers an object it deleted, to delete it again if it comes back:
/// longer than kube-apiserver's default request timeout (60 s), so a write sent before the
/// deletion and landing late (a client that gave up waiting, a server slow to commit) is met.
const DELETED_REMEMBERED: SignedDuration = SignedDuration::from_secs(120);

/// Something the owner of an [`Applier`] should act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// The report of a Description changed (an object's status changed, or drift was repaired):
    /// the owner key `<description-namespace>.<description-name>`.
    ReportChanged(String),
    /// An inventory ConfigMap was deleted by someone else; the applier rewrote it from memory,
    /// and the owner may ask for a fresh snapshot.
    InventoryLost(String),
}

/// What the applier remembers of one desired object.
#[derive(Clone, Debug)]
pub(crate) struct Desired {
    pub(crate) owner: String,
    pub(crate) kind: Kind,
    /// The applied configuration, minus yielded fields, as compact JSON. It is kept for every
    /// applied object but read only by drift checks and repairs, so it stays serialised: parsed,
    /// even a small ConfigMap weighs a few KiB of map nodes.
    config: Box<str>,
    pub(crate) yielded: Vec<String>,
    pub(crate) status: Option<Value>,
    /// It is an object of a Helm release (Helm creates, upgrades and deletes it; the applier
    /// only repairs its drift).
    pub(crate) release: bool,
}

impl Desired {
    /// Whether `live` differs from this: another Description's ownership annotation, or a
    /// field of the applied configuration changed.
    pub(crate) fn differs_from(&self, live: &DynamicObject) -> bool {
        if owner_of(live) != Some(self.owner.as_str()) {
            return true;
        }
        match serde_json::to_value(live) {
            Ok(live) => self
                .config()
                .is_some_and(|config| !fieldpath::is_subset(&config, &live)),
            Err(_) => false,
        }
    }

    /// The applied configuration (it was serialised from a `Value`, so it parses).
    pub(crate) fn config(&self) -> Option<Value> {
        serde_json::from_str(&self.config).ok()
    }
}

/// What the applier remembers of one Description.
#[derive(Clone, Debug, Default)]
struct DescState {
    name: String,
    uid: String,
    generation: i64,
    /// Its objects are orphaned, not deleted, when they leave the cluster.
    orphan: bool,
    /// Every object of the Description, in order, with its error when it could not be applied
    /// (also the unparsable ones, which have no [`Desired`] entry).
    objects: Vec<(ObjectRef, Option<String>)>,
    /// What became of its charts, in order.
    releases: Vec<ReleaseReport>,
    /// The fingerprint ([`fingerprint`]) of the Description as last applied, when that apply
    /// succeeded in full and drift repair has kept its objects so since (a failed repair clears
    /// it): the same Description delivered again needs no apply.
    in_place: Option<u64>,
}

#[derive(Default)]
pub(crate) struct State {
    descriptions: HashMap<String, DescState>,
    pub(crate) objects: HashMap<ObjectRef, Desired>,
    /// Inventories read from the cluster (and kept current): owner key → inventory.
    inventories: HashMap<String, Inventory>,
    inventories_loaded: bool,
    /// The registration the applier answers for; `None` (Push mode, tests): every Description.
    scope: Option<Scope>,
    /// Descriptions being applied, each with the last state the drift watchers saw of its
    /// objects meanwhile. The watch event of the apply's own write can arrive before the apply
    /// records what it wanted; judged against the old wanted state it would look like drift
    /// (and cost a repair, a report and a status write in the parent per object and edit).
    /// Such observations wait here and are judged once the apply has recorded its result.
    applying: HashMap<String, HashMap<ObjectRef, Box<DynamicObject>>>,
    /// Objects the applier deleted in the last [`DELETED_REMEMBERED`]: object → its owner key
    /// and when. One that comes back with that owner's annotation while no Description wants
    /// it is a late write of the owner's (an apply or repair sent before the deletion): drift
    /// repair deletes it again. Nothing else would: no inventory lists it as applied. Each
    /// Description's inventory keeps its own (read back at start), so that an applier started
    /// since (a restarted agent, a new holder of the Push Lease) knows them too. Wall-clock
    /// time, for that reason.
    deleted: HashMap<ObjectRef, (String, Timestamp)>,
    /// When `deleted` was last rid of its expired entries: at most every
    /// [`DELETED_SWEEP_EVERY`], so that deleting N objects at once costs O(N), not O(N²).
    deleted_swept: Option<Timestamp>,
    /// Descriptions gone with all their objects whose inventory is kept for its `deleted` list
    /// ([`Inventory::removed`]), with when: deleted once that list is no longer remembered.
    removed: HashMap<String, Timestamp>,
    /// When `removed` was last looked through for expired inventories: at most every
    /// [`DELETED_SWEEP_EVERY`], so that a prune of N Descriptions does not look N times.
    removed_swept: Option<Timestamp>,
}

/// How often [`State::deleted`] is rid of expired entries (each lookup skips them anyway), and
/// [`State::removed`] of expired inventories.
const DELETED_SWEEP_EVERY: SignedDuration = SignedDuration::from_secs(30);

/// Whether a deletion at `at` is recent enough to be remembered.
fn remembered(at: Timestamp) -> bool {
    Timestamp::now().duration_since(at) < DELETED_REMEMBERED
}

impl State {
    /// What the Description `key` deleted lately, for its inventory, in a stable order.
    fn deleted_by_description(&self, key: &str) -> Vec<inventory::DeletedEntry> {
        let mut entries: Vec<inventory::DeletedEntry> = self
            .deleted
            .iter()
            .filter(|(_, (owner, at))| owner == key && remembered(*at))
            .map(|(object, (_, at))| inventory::DeletedEntry {
                object: object.clone(),
                at: at.to_string(),
            })
            .collect();
        entries.sort_by(|a, b| a.object.cmp(&b.object));
        entries
    }
}

/// One object prepared for applying.
struct Prepared {
    object: ObjectRef,
    config: Value,
}

/// The result of applying one object.
struct Applied {
    object: ObjectRef,
    desired: Option<Desired>,
    error: Option<String>,
}

/// What a Description applied before an apply: its inventory entries, and the fields each of
/// its objects left to other managers.
struct Before {
    entries: Vec<Entry>,
    yielded: HashMap<ObjectRef, Vec<String>>,
}

/// Applies Descriptions to one child cluster. Cheap to share behind an `Arc`.
pub struct Applier {
    pub(crate) client: kube::Client,
    field_manager: String,
    adopt_existing: bool,
    adopt_clusternet: bool,
    /// The namespaces the agent may write (`--namespaces`); `None`: every namespace and
    /// cluster-scoped objects.
    allowed_namespaces: Option<BTreeSet<String>>,
    delete_timeout: Duration,
    /// How charts are installed; `None`: this applier installs no charts (they are reported as
    /// failed).
    helm: Option<Helm>,
    discovery: Discovery,
    store: inventory::Store,
    pub(crate) state: Mutex<State>,
    notifier: Mutex<Option<mpsc::UnboundedSender<Notice>>>,
    drift: drift::Watchers,
    /// The namespaces whose release identity was made (see [`Helm::with_release_account`]).
    release_identities: Mutex<HashSet<String>>,
    /// One lock per Description: applying, deleting and repairing it never interleave.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Drift repair runs ([`crate::start_drift_repair`]): what an apply put in place stays so,
    /// and a Description delivered again unchanged is not applied again.
    repairs_drift: std::sync::atomic::AtomicBool,
    pub(crate) metrics: Arc<Metrics>,
}

impl Applier {
    /// An applier writing to `child` as `field_manager` (the agent uses `atoll-agent`).
    pub fn new(child: kube::Client, field_manager: impl Into<String>) -> Self {
        let field_manager = field_manager.into();
        Self {
            discovery: Discovery::new(child.clone()),
            store: inventory::Store::new(child.clone(), &field_manager, inventory::NAMESPACE),
            drift: drift::Watchers::new(child.clone()),
            client: child,
            field_manager,
            adopt_existing: false,
            adopt_clusternet: false,
            allowed_namespaces: None,
            delete_timeout: Duration::from_secs(120),
            helm: None,
            state: Mutex::new(State::default()),
            notifier: Mutex::new(None),
            locks: Mutex::new(HashMap::new()),
            release_identities: Mutex::new(HashSet::new()),
            repairs_drift: std::sync::atomic::AtomicBool::new(false),
            metrics: Arc::new(Metrics::default()),
        }
    }

    /// Installs HelmChart feeds with `helm`.
    pub fn with_helm(mut self, helm: Helm) -> Self {
        self.helm = Some(helm);
        self
    }

    /// Take over existing objects that no Description owns (`--adopt-existing`). Without it, only
    /// objects annotated `apps.clusternet.io/adopt: "true"` in the child are taken over.
    pub fn with_adopt_existing(mut self, adopt: bool) -> Self {
        self.adopt_existing = adopt;
        self
    }

    /// Take over, in place, objects a Clusternet agent deployed (`--adopt-clusternet`, for a
    /// migration): their owner annotation names a Clusternet Description
    /// (`<namespace>.<base>-generic`) and no inventory of this child lists them.
    pub fn with_adopt_clusternet(mut self, adopt: bool) -> Self {
        self.adopt_clusternet = adopt;
        self
    }

    /// Writes only namespaced objects in `namespaces` (`--namespaces`, for an agent bound to
    /// the narrower role of `manifests/agent/namespaced`): any other object is refused before
    /// the API server is called, with a per-object error in the Description's report, and
    /// drift repair watches only these namespaces. An empty set leaves the agent unrestricted.
    pub fn with_allowed_namespaces(mut self, namespaces: BTreeSet<String>) -> Self {
        self.allowed_namespaces = (!namespaces.is_empty()).then_some(namespaces);
        self
    }

    /// The namespaces the agent may write, when restricted.
    pub fn allowed_namespaces(&self) -> Option<&BTreeSet<String>> {
        self.allowed_namespaces.as_ref()
    }

    /// Keeps the agent's state (inventories, the cluster token Secret) in `namespace` of the
    /// child instead of `clusternet-system` (lets simulated agents share one cluster).
    pub fn with_state_namespace(mut self, namespace: &str) -> Self {
        self.store = inventory::Store::new(self.client.clone(), &self.field_manager, namespace);
        self
    }

    /// The namespace of the agent's state in the child.
    pub fn state_namespace(&self) -> &str {
        self.store.namespace()
    }

    /// Counts into these metrics (by default, unregistered ones).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The metrics this applier counts into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// How long a deletion may take before it is reported as failed.
    pub fn with_delete_timeout(mut self, timeout: Duration) -> Self {
        self.delete_timeout = timeout;
        self
    }

    /// Sends [`Notice`]s to `tx` from now on.
    pub fn set_notifier(&self, tx: mpsc::UnboundedSender<Notice>) {
        *lock(&self.notifier) = Some(tx);
    }

    /// Starts the drift watchers: every kind applied so far and from now on, and the
    /// inventories. Returns what they observe, for the repair loop ([`crate::repair`]); `None`
    /// when they were started before. They stop when the applier is dropped.
    pub(crate) fn watch_drift(&self) -> Option<UnboundedReceiver<drift::Observation>> {
        self.drift.start(self.state_namespace())
    }

    /// What to watch for `kind`: the whole cluster (`None`), or, for an agent restricted to
    /// some namespaces (`--namespaces`), each of them for a namespaced kind and nothing for a
    /// cluster-scoped one (the agent applies none).
    fn drift_scopes(&self, kind: &Kind) -> Vec<Option<String>> {
        match self.allowed_namespaces() {
            None => vec![None],
            Some(_) if !kind.namespaced => Vec::new(),
            Some(allowed) => allowed.iter().cloned().map(Some).collect(),
        }
    }

    /// Where this applier may write: never its own namespace, only `--namespaces` when set.
    fn namespace_rules(&self) -> helm::NamespaceRules<'_> {
        helm::NamespaceRules {
            own: self.store.namespace(),
            allowed: self.allowed_namespaces(),
        }
    }

    /// How many kinds the drift watchers watch.
    pub fn watched_kinds(&self) -> usize {
        self.drift.watched_kinds()
    }

    /// The field manager.
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// Answers for the Descriptions of `scope` from now on: inventories of other dedicated
    /// namespaces (another agent sharing the state namespace) are never pruned, and a
    /// Description takes over the objects of its namesake in an earlier registration.
    pub fn set_scope(&self, scope: Scope) {
        self.state().scope = Some(scope);
    }

    pub(crate) fn notify(&self, notice: Notice) {
        if let Some(tx) = lock(&self.notifier).as_ref() {
            let _ = tx.send(notice);
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn description_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.locks).entry(key.to_owned()).or_default().clone()
    }

    /// Reads the inventories from the child once, so that pruning knows what earlier runs of
    /// the agent applied.
    pub async fn load_inventory(&self) -> Result<(), Error> {
        if self.state().inventories_loaded {
            return Ok(());
        }
        let inventories = self.store.list().await?;
        let remembered_kinds = self.take_inventories(inventories);
        // An object deleted lately is watched, so that a late write bringing it back is seen
        // even when no Description applies its kind any more (its Description removed whole).
        for (api_version, kind) in remembered_kinds {
            match self.discovery.resolve(&api_version, &kind).await {
                Ok(kind) => self.drift.ensure(&kind, || self.drift_scopes(&kind)),
                Err(e) => {
                    tracing::debug!(%api_version, %kind, error = %e, "a kind deleted lately is not watched");
                }
            }
        }
        Ok(())
    }

    /// Keeps the inventories read from the child, unless another call kept them first;
    /// returns the kinds of the objects they deleted lately (empty when not kept).
    fn take_inventories(&self, inventories: Vec<Inventory>) -> BTreeSet<(String, String)> {
        let mut state = self.state();
        if state.inventories_loaded {
            return BTreeSet::new();
        }
        for inv in inventories {
            // The latest of its deletions (the epoch when none can be read: expired at once).
            let mut last = Timestamp::default();
            for entry in &inv.deleted {
                let Ok(at) = entry.at.parse::<Timestamp>() else {
                    continue;
                };
                last = last.max(at);
                if remembered(at) {
                    state
                        .deleted
                        .entry(entry.object.clone())
                        .or_insert_with(|| (inv.description.clone(), at));
                }
            }
            if inv.removed {
                // Nothing to prune or restore: only its deletions matter, kept above.
                state.removed.insert(inv.description.clone(), last);
                continue;
            }
            state.inventories.insert(inv.description.clone(), inv);
        }
        state.inventories_loaded = true;
        state
            .deleted
            .keys()
            .map(|o| (o.api_version.clone(), o.kind.clone()))
            .collect()
    }

    /// The current report of a Description (statuses as last seen by the drift watchers).
    pub fn report(&self, key: &str) -> Option<Report> {
        let state = self.state();
        let desc = state.descriptions.get(key)?;
        let objects = desc
            .objects
            .iter()
            .map(|(object, error)| ObjectReport {
                object: object.clone(),
                status: state
                    .objects
                    .get(object)
                    .filter(|d| d.owner == key)
                    .and_then(|d| d.status.clone()),
                error: error.clone(),
            })
            .collect();
        Some(
            Report::from_objects(&desc.name, &desc.uid, desc.generation, objects)
                .with_releases(desc.releases.clone()),
        )
    }

    /// Applies a Description: namespaces first, then CRDs (waiting until they are
    /// Established), then everything else; prunes the objects the Description no longer
    /// contains. Never fails as a whole: every problem is reported per object.
    pub async fn apply(&self, desc: &Description) -> Report {
        let key = desc.key();
        let guard = self.description_lock(&key);
        let _guard = guard.lock().await;
        // Applies of one Description may be asked for out of order (background chart applies
        // of two generations, or of two hub streams, reach this lock in either order): an
        // older generation than the one applied never replaces it.
        if let Some(report) = self.superseded(desc, &key) {
            crate::metrics::count(&self.metrics.applies, "superseded");
            return report;
        }
        // A Description delivered again as it was applied (a hub restart, a reconnection, a
        // resync) is in place already: drift repair keeps it so. Only its report goes back.
        // Only with drift repair running can it be (see `in_place`): no digest is taken without.
        let fingerprint = self
            .repairs_drift
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| fingerprint(desc));
        if let Some(report) = fingerprint.and_then(|f| self.in_place(desc, &key, f)) {
            crate::metrics::count(&self.metrics.applies, "unchanged");
            return report;
        }
        let started = Instant::now();
        self.state().applying.insert(key.clone(), HashMap::new());
        let report = self.apply_locked(desc, &key).await;
        // Normally ended once the result was recorded; an early return ends it here.
        self.end_applying(&key);
        if let Some(state) = self.state().descriptions.get_mut(&key) {
            state.in_place =
                fingerprint.filter(|_| report.phase == Phase::Success && desc.charts.is_empty());
        }
        self.metrics
            .apply_seconds
            .observe(started.elapsed().as_secs_f64());
        crate::metrics::count(&self.metrics.applies, report.phase.as_str());
        report
    }

    /// The report of the applied Description when a newer generation of `desc` (same uid) was
    /// applied already; `None` when `desc` may be applied.
    fn superseded(&self, desc: &Description, key: &str) -> Option<Report> {
        {
            let state = self.state();
            let applied = state.descriptions.get(key)?;
            if applied.uid != desc.uid || applied.generation <= desc.generation {
                return None;
            }
        }
        self.report(key)
    }

    /// The report of `desc` when it is in place as last applied (same uid, generation and
    /// content, applied in full, drift repaired since); `None` when it must be applied. Charts
    /// are always installed again: nothing watches a release for drift. Asked only while drift
    /// repair runs.
    fn in_place(&self, desc: &Description, key: &str, fingerprint: u64) -> Option<Report> {
        {
            let state = self.state();
            let applied = state.descriptions.get(key)?;
            if applied.uid != desc.uid
                || applied.generation != desc.generation
                || applied.in_place != Some(fingerprint)
            {
                return None;
            }
        }
        self.report(key)
    }

    /// Records that drift repair runs for this applier (see [`Applier::in_place`]).
    pub(crate) fn set_repairs_drift(&self) {
        self.repairs_drift
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A repair of `object` failed: its Description's next delivery is applied in full.
    pub(crate) fn repair_failed(&self, object: &ObjectRef) {
        let mut state = self.state();
        let Some(owner) = state.objects.get(object).map(|d| d.owner.clone()) else {
            return;
        };
        if let Some(desc) = state.descriptions.get_mut(&owner) {
            desc.in_place = None;
        }
    }

    /// The phases of an apply, under the Description's lock: prepare, record the intent in the
    /// inventory, apply in order, prune what the Description dropped, record what was applied,
    /// watch the new kinds, report.
    async fn apply_locked(&self, desc: &Description, key: &str) -> Report {
        if let Err(e) = self.load_inventory().await {
            return failure_report(desc, &e.to_string());
        }
        let Prepare {
            mut order,
            objects,
            unreadable,
        } = prepare_all(desc, key);
        let before = match self.record_intent(desc, key, &objects).await {
            Ok(before) => before,
            Err(e) => return failure_report(desc, &e.to_string()),
        };
        let results = self.apply_in_order(key, objects, &before.yielded).await;
        let errors: HashMap<&ObjectRef, &String> = results
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| (&r.object, e)))
            .collect();
        for (object, error) in order.iter_mut() {
            if error.is_none()
                && let Some(e) = errors.get(object)
            {
                *error = Some((*e).clone());
            }
        }
        let desired: HashSet<ObjectRef> = results.iter().map(|r| r.object.clone()).collect();
        // An object that cannot be read may be the one that replaces an object applied before:
        // pruning now could delete what the Description still means to run. Everything stays
        // (in the inventory) until every object reads.
        let dropped = if unreadable {
            tracing::warn!(description = %key, "an object of the Description cannot be read; nothing it applied before is pruned until every object can be");
            Dropped::Keep
        } else if desc.orphan {
            Dropped::Orphan
        } else {
            Dropped::Delete
        };
        let kept = self
            .prune_removed(key, &before.entries, &desired, dropped)
            .await;
        let kinds = self
            .record_applied(desc, key, order, results, &before.entries, kept)
            .await;
        for kind in kinds {
            self.drift.ensure(&kind, || self.drift_scopes(&kind));
        }
        // Helm's writes of the release's objects are the apply's own too: judged against the
        // rendering recorded before Helm ran, they would be "repaired" back to the old release.
        let (releases, release_objects) = self.apply_releases(desc, key).await;
        if let Some(state) = self.state().descriptions.get_mut(key) {
            state.releases = releases;
            state.objects.extend(release_objects);
        }
        self.end_applying(key);
        self.report(key)
            .unwrap_or_else(|| failure_report(desc, "the Description vanished while applying"))
    }

    /// The Helm releases the Description's inventory records.
    fn recorded_releases(&self, key: &str) -> Vec<ReleaseEntry> {
        self.state()
            .inventories
            .get(key)
            .map(|i| i.releases.clone())
            .unwrap_or_default()
    }

    /// Writes the Description's inventory with `releases` (its objects as recorded), when they
    /// changed.
    async fn record_releases(
        &self,
        key: &str,
        uid: &str,
        orphan: bool,
        releases: Vec<ReleaseEntry>,
    ) -> Result<(), Error> {
        let inv = {
            let state = self.state();
            let current = state.inventories.get(key);
            if current.map_or(releases.is_empty(), |i| i.releases == releases) {
                return Ok(());
            }
            Inventory {
                description: key.to_owned(),
                uid: uid.to_owned(),
                objects: current.map(|i| i.objects.clone()).unwrap_or_default(),
                releases,
                orphan,
                deleted: state.deleted_by_description(key),
                removed: false,
            }
        };
        self.store.write(&inv).await?;
        self.state().inventories.insert(key.to_owned(), inv);
        Ok(())
    }

    /// Installs, upgrades and uninstalls the Description's Helm releases (see
    /// [`helm::sync_releases`]), recording them in its inventory before and after Helm runs,
    /// and takes the objects of its deployed releases under drift repair. Returns the releases'
    /// reports and their objects (for the Description's report).
    async fn apply_releases(
        &self,
        desc: &Description,
        key: &str,
    ) -> (Vec<ReleaseReport>, Vec<(ObjectRef, Option<String>)>) {
        let recorded = self.recorded_releases(key);
        if desc.charts.is_empty() && recorded.is_empty() {
            self.watch_release_objects(key, Vec::new()).await;
            return (Vec::new(), Vec::new());
        }
        let mut plan = helm::plan_releases(&desc.charts, &recorded, self.namespace_rules());
        self.ensure_release_identities(&mut plan).await;
        if let Err(e) = self
            .record_releases(key, &desc.uid, desc.orphan, plan.intent.clone())
            .await
        {
            // Helm does not run unrecorded: a release it changed could neither be found again
            // (a leak) nor be known to differ from what the inventory says it runs.
            tracing::warn!(description = %key, error = %e, "inventory write failed; Helm not run");
            let reports = helm::not_run(&plan, &format!("{e}; retried"));
            return (reports, Vec::new());
        }
        let synced = helm::sync_releases(
            self.helm.as_ref(),
            plan,
            &recorded,
            desc.orphan,
            self.adopt_existing,
        )
        .await;
        if let Err(e) = self
            .record_releases(key, &desc.uid, desc.orphan, synced.entries)
            .await
        {
            // The intent recorded before Helm ran holds an empty digest for every release Helm
            // was to change, so the next apply runs Helm for them again.
            tracing::warn!(description = %key, error = %e, "inventory write failed");
        }
        // A release that failed may have lost its identity (its RoleBinding deleted, say):
        // made again on the next apply.
        for failed in synced.reports.iter().filter(|r| r.error.is_some()) {
            lock(&self.release_identities).remove(&failed.namespace);
        }
        let objects = self.watch_release_objects(key, synced.objects).await;
        (synced.reports, objects)
    }

    /// When helm acts as a per-namespace identity, makes it exist for each planned release
    /// (once per namespace, again after a release there failed); a release whose identity
    /// cannot be made is reported with why, and helm does not run it.
    async fn ensure_release_identities(&self, plan: &mut helm::ReleasePlan) {
        let Some(account) = self.helm.as_ref().and_then(Helm::release_account) else {
            return;
        };
        for chart in &mut plan.charts {
            let Ok(release) = chart else { continue };
            if lock(&self.release_identities).contains(&release.namespace) {
                continue;
            }
            // An agent confined to namespaces (--namespaces) writes no Namespace objects.
            let create_namespace = self.allowed_namespaces.is_none()
                && release.options.create_namespace.unwrap_or(true);
            if let Err(e) = crate::release_identity::ensure(
                &self.client,
                &release.namespace,
                account,
                create_namespace,
                &self.field_manager,
            )
            .await
            {
                tracing::warn!(release = %release, error = %e, "the release's identity could not be made; helm not run");
                *chart = Err(Box::new(ReleaseReport::failed(
                    &release.name,
                    &release.namespace,
                    e.to_string(),
                )));
            } else {
                lock(&self.release_identities).insert(release.namespace.clone());
            }
        }
    }

    /// Puts the objects of a Description's deployed releases under drift repair, as its plain
    /// objects are: each is marked as the Description's (the ownership annotation and the
    /// managed-by label, by a merge patch that leaves Helm's fields alone; again after Helm
    /// changed the release) and remembered with Helm's rendering as its wanted state, so that
    /// a deleted or edited object is applied again. Objects of releases that went are
    /// forgotten (Helm deleted them). Returns the objects, each with its error.
    async fn watch_release_objects(
        &self,
        key: &str,
        releases: Vec<helm::ReleaseObjects>,
    ) -> Vec<(ObjectRef, Option<String>)> {
        let mut reported = Vec::new();
        let mut kept: HashSet<ObjectRef> = HashSet::new();
        let mut kinds: Vec<Kind> = Vec::new();
        for release in releases {
            for (index, raw) in release.objects.iter().enumerate() {
                let Prepared {
                    mut object,
                    mut config,
                } = match prepare(raw, index, key) {
                    Ok(prepared) => prepared,
                    Err((object, error)) => {
                        reported.push((object, Some(error)));
                        continue;
                    }
                };
                let kind = match self
                    .discovery
                    .resolve(&object.api_version, &object.kind)
                    .await
                {
                    Ok(kind) => kind,
                    Err(e) => {
                        reported.push((object, Some(e.to_string())));
                        continue;
                    }
                };
                scope_to_kind(&mut object, &mut config, &kind, &release.namespace);
                let config_text = serde_json::to_string(&config).unwrap_or_default();
                let known = self
                    .state()
                    .objects
                    .get(&object)
                    .is_some_and(|d| d.owner == key && d.release && *d.config == *config_text);
                if release.changed || !known {
                    let marks = serde_json::json!({"metadata": {
                        "labels": {LABEL_MANAGED_BY: MANAGED_BY_AGENT},
                        "annotations": {ANNOTATION_OWNED_BY_DESCRIPTION: key},
                    }});
                    let params = PatchParams {
                        field_manager: Some(self.field_manager.clone()),
                        ..PatchParams::default()
                    };
                    let marked = self
                        .api(&kind, &object.namespace)
                        .patch(&object.name, &params, &Patch::Merge(&marks))
                        .await;
                    if let Err(source) = marked {
                        let error = Error::ApplyObject {
                            object: object.to_string(),
                            source,
                        };
                        reported.push((object, Some(error.to_string())));
                        continue;
                    }
                }
                {
                    let mut state = self.state();
                    let status = state.objects.get(&object).and_then(|d| d.status.clone());
                    state.objects.insert(
                        object.clone(),
                        Desired {
                            owner: key.to_owned(),
                            kind: kind.clone(),
                            config: config_text.into_boxed_str(),
                            yielded: Vec::new(),
                            status,
                            release: true,
                        },
                    );
                }
                if !kinds.iter().any(|k| k.resource == kind.resource) {
                    kinds.push(kind);
                }
                kept.insert(object.clone());
                reported.push((object, None));
            }
        }
        self.state()
            .objects
            .retain(|r, d| d.owner != key || !d.release || kept.contains(r));
        for kind in kinds {
            self.drift.ensure(&kind, || self.drift_scopes(&kind));
        }
        reported
    }

    /// Reads what the Description applied before (its inventory, then memory, with the fields
    /// it left to other managers) and records the objects it adds in the inventory before they
    /// are created, so that a crash half-way cannot leak objects.
    async fn record_intent(
        &self,
        desc: &Description,
        key: &str,
        objects: &[Prepared],
    ) -> Result<Before, Error> {
        let entries: Vec<Entry> = self
            .state()
            .inventories
            .get(key)
            .map(|i| i.objects.clone())
            .unwrap_or_default();
        let known: HashSet<&ObjectRef> = entries.iter().map(|e| &e.object).collect();
        let mut yielded: HashMap<ObjectRef, Vec<String>> = entries
            .iter()
            .map(|e| (e.object.clone(), e.yielded.clone()))
            .collect();
        for (r, d) in self.state().objects.iter().filter(|(_, d)| d.owner == key) {
            yielded.insert(r.clone(), d.yielded.clone());
        }
        let added: Vec<Entry> = objects
            .iter()
            .filter(|p| !known.contains(&p.object))
            .map(|p| Entry {
                object: p.object.clone(),
                yielded: Vec::new(),
            })
            .collect();
        if !added.is_empty() {
            let inv = Inventory {
                description: key.to_owned(),
                uid: desc.uid.clone(),
                objects: entries.iter().cloned().chain(added).collect(),
                releases: self.recorded_releases(key),
                orphan: desc.orphan,
                deleted: self.state().deleted_by_description(key),
                removed: false,
            };
            self.store.write(&inv).await?;
            self.state().inventories.insert(key.to_owned(), inv);
        }
        Ok(Before { entries, yielded })
    }

    /// Applies namespaces first, then CRDs (waiting until each is Established, so that its
    /// custom resources can follow), then everything else.
    async fn apply_in_order(
        &self,
        key: &str,
        objects: Vec<Prepared>,
        prior: &HashMap<ObjectRef, Vec<String>>,
    ) -> Vec<Applied> {
        let [namespaces, crds, rest] = apply_order(objects);
        let mut results = self.apply_batch(key, namespaces, prior).await;
        let crd_results = self.apply_batch(key, crds, prior).await;
        for r in &crd_results {
            if r.error.is_none()
                && let Err(e) = self.wait_established(&r.object.name).await
            {
                tracing::warn!(crd = %r.object.name, error = %e, "CRD not established");
            }
        }
        results.extend(crd_results);
        results.extend(self.apply_batch(key, rest, prior).await);
        results
    }

    /// Deals with the objects the Description applied before but no longer has, as `dropped`
    /// says. Returns the entries that stay in the inventory (kept, or their deletion failed), to
    /// be pruned again.
    async fn prune_removed(
        &self,
        key: &str,
        before: &[Entry],
        desired: &HashSet<ObjectRef>,
        dropped: Dropped,
    ) -> Vec<Entry> {
        let mut kept = Vec::new();
        for entry in before.iter().filter(|e| !desired.contains(&e.object)) {
            match dropped {
                Dropped::Keep => {
                    kept.push(entry.clone());
                    continue;
                }
                Dropped::Orphan => {
                    tracing::info!(object = %entry.object, description = %key, "orphaning an object the Description no longer has");
                    continue;
                }
                Dropped::Delete => {}
            }
            if let Err(e) = self.delete_object(key, &entry.object, false).await {
                tracing::warn!(object = %entry.object, error = %e, "prune failed; keeping it in the inventory");
                kept.push(entry.clone());
            }
        }
        kept
    }

    /// Remembers what was applied (for reports and drift repair) and writes the inventory when
    /// it changed: the objects applied, the ones it held before that failed this time, and the
    /// ones a prune could not delete. Returns the kinds applied, each once.
    async fn record_applied(
        &self,
        desc: &Description,
        key: &str,
        order: Vec<(ObjectRef, Option<String>)>,
        results: Vec<Applied>,
        before: &[Entry],
        kept: Vec<Entry>,
    ) -> Vec<Kind> {
        let mut kinds = Vec::new();
        let entries: Vec<Entry> = {
            let mut state = self.state();
            // Forget objects this Description no longer has.
            let desired: HashSet<&ObjectRef> = results.iter().map(|r| &r.object).collect();
            state
                .objects
                .retain(|r, d| d.owner != key || d.release || desired.contains(r));
            let mut entries = kept;
            for r in results {
                match r.desired {
                    Some(d) => {
                        entries.push(Entry {
                            object: r.object.clone(),
                            yielded: d.yielded.clone(),
                        });
                        if !kinds.iter().any(|k: &Kind| k.resource == d.kind.resource) {
                            kinds.push(d.kind.clone());
                        }
                        state.deleted.remove(&r.object);
                        state.objects.insert(r.object, d);
                    }
                    None => {
                        if let Some(held) = before.iter().find(|e| e.object == r.object) {
                            entries.push(held.clone());
                        }
                    }
                }
            }
            state.descriptions.insert(
                key.to_owned(),
                DescState {
                    name: desc.name.clone(),
                    uid: desc.uid.clone(),
                    generation: desc.generation,
                    orphan: desc.orphan,
                    objects: order,
                    releases: Vec::new(),
                    in_place: None,
                },
            );
            entries
        };
        let inv = Inventory {
            description: key.to_owned(),
            uid: desc.uid.clone(),
            objects: entries,
            releases: self.recorded_releases(key),
            orphan: desc.orphan,
            deleted: self.state().deleted_by_description(key),
            removed: false,
        };
        if self.state().inventories.get(key) != Some(&inv) {
            match self.store.write(&inv).await {
                Ok(()) => {
                    self.state().inventories.insert(key.to_owned(), inv);
                }
                Err(e) => tracing::warn!(description = %key, error = %e, "inventory write failed"),
            }
        }
        kinds
    }

    async fn apply_batch(
        &self,
        key: &str,
        batch: Vec<Prepared>,
        prior: &HashMap<ObjectRef, Vec<String>>,
    ) -> Vec<Applied> {
        futures::stream::iter(batch)
            .map(|p| {
                let before = prior.get(&p.object).cloned();
                self.apply_prepared(key, p, before)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await
    }

    async fn apply_prepared(&self, key: &str, p: Prepared, prior: Option<Vec<String>>) -> Applied {
        let object = p.object.clone();
        match self.apply_one(key, p, prior).await {
            Ok(desired) => Applied {
                object,
                desired: Some(desired),
                error: None,
            },
            Err(e) => Applied {
                object,
                desired: None,
                error: Some(e.to_string()),
            },
        }
    }

    async fn apply_one(
        &self,
        key: &str,
        p: Prepared,
        prior: Option<Vec<String>>,
    ) -> Result<Desired, Error> {
        let Prepared {
            mut object,
            mut config,
        } = p;
        let kind = self
            .discovery
            .resolve(&object.api_version, &object.kind)
            .await?;
        scope_to_kind(&mut object, &mut config, &kind, "default");
        let target = if kind.namespaced {
            helm::WriteTarget::In(&object.namespace)
        } else if object.kind == "Namespace" {
            helm::WriteTarget::Namespace(&object.name)
        } else {
            helm::WriteTarget::Cluster
        };
        if let Some(refusal) = self.namespace_rules().refusal(&object.to_string(), target) {
            return Err(refusal);
        }
        // Ownership: ours already (applied before by this Description, or by its namesake in an
        // earlier registration), or check the live object.
        if let Some(owner) = self.foreign_owner(key, &object) {
            return Err(Error::OwnershipConflict {
                object: object.to_string(),
                description: key.to_owned(),
                owner,
            });
        }
        let owned_before = prior.is_some();
        let yielded = prior.unwrap_or_default();
        let api = self.api(&kind, &object.namespace);
        if !owned_before {
            match api.get_opt(&object.name).await {
                Ok(None) => {}
                Ok(Some(live)) => {
                    let annotations = live.metadata.annotations.unwrap_or_default();
                    let owner = annotations.get(ANNOTATION_OWNED_BY_DESCRIPTION);
                    let part_of_atoll = live
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(known::LABEL_PART_OF))
                        .is_some_and(|v| v == known::PART_OF_ATOLL);
                    if part_of_atoll && owner.is_none() {
                        return Err(Error::AtollOwnObject {
                            object: object.to_string(),
                        });
                    }
                    let adopt = annotations
                        .get(ANNOTATION_ADOPT)
                        .is_some_and(|v| v == "true")
                        || (self.adopt_existing && owner.is_none())
                        || (self.adopt_clusternet && owner.is_some_and(|o| is_clusternet_owner(o)));
                    // Ours already when an earlier run applied it and its inventory was lost.
                    if self.owner_keeps(key, &object, owner, adopt) {
                        return Err(Error::OwnershipConflict {
                            object: object.to_string(),
                            description: key.to_owned(),
                            owner: owner.cloned().unwrap_or_else(|| "nobody".to_owned()),
                        });
                    }
                }
                Err(source) => {
                    return Err(Error::GetObject {
                        object: object.to_string(),
                        source,
                    });
                }
            }
        }
        let mut yielded = yielded;
        for path in &yielded {
            fieldpath::remove_path(&mut config, path);
        }
        let mut force = false;
        let mut attempts = 0;
        let live = loop {
            attempts += 1;
            let mut params = PatchParams::apply(&self.field_manager);
            if force {
                params = params.force();
            }
            match api
                .patch(&object.name, &params, &Patch::Apply(&config))
                .await
            {
                Ok(live) => break live,
                Err(kube::Error::Api(status)) if status.code == 409 && attempts < 3 => {
                    let conflicts = conflicts_of(&status);
                    if conflicts.is_empty() {
                        return Err(Error::ApplyObject {
                            object: object.to_string(),
                            source: kube::Error::Api(status),
                        });
                    }
                    let owners = match api.get_opt(&object.name).await {
                        Ok(Some(live)) => declared_owners(&live, &self.field_manager),
                        _ => HashSet::new(),
                    };
                    for (manager, field) in conflicts {
                        let foreign = owners.contains(&manager);
                        if foreign {
                            tracing::info!(%object, %field, %manager, "leaving a field to its owner");
                            fieldpath::remove_path(&mut config, &field);
                            if !yielded.contains(&field) {
                                yielded.push(field);
                            }
                        } else {
                            force = true;
                        }
                    }
                }
                Err(source) => {
                    return Err(Error::ApplyObject {
                        object: object.to_string(),
                        source,
                    });
                }
            }
        };
        Ok(Desired {
            owner: key.to_owned(),
            kind,
            config: config.to_string().into_boxed_str(),
            yielded,
            status: status_of(&live),
            release: false,
        })
    }

    /// The Description other than `key` this run applied `object` for, unless `key` succeeds it.
    fn foreign_owner(&self, key: &str, object: &ObjectRef) -> Option<String> {
        let state = self.state();
        let owner = &state.objects.get(object)?.owner;
        (owner != key && !state.scope.as_ref().is_some_and(|s| s.succeeds(key, owner)))
            .then(|| owner.clone())
    }

    /// Whether the live object's `owner` (its annotation) keeps it from Description `key`:
    /// `owner` still lists it in its inventory (an adopt annotation left on an object adopted
    /// earlier must not hand it on after a restart), or nobody invited `key` to adopt it. A
    /// Description succeeding `owner` from an earlier registration takes it over.
    fn owner_keeps(
        &self,
        key: &str,
        object: &ObjectRef,
        owner: Option<&String>,
        adopt: bool,
    ) -> bool {
        let Some(owner) = owner else {
            return !adopt;
        };
        if owner == key {
            return false;
        }
        let state = self.state();
        if state.scope.as_ref().is_some_and(|s| s.succeeds(key, owner)) {
            return false;
        }
        let listed = state
            .inventories
            .get(owner)
            .is_some_and(|inv| inv.objects.iter().any(|e| e.object == *object));
        listed || !adopt
    }

    pub(crate) fn api(&self, kind: &Kind, namespace: &str) -> Api<DynamicObject> {
        if kind.namespaced {
            Api::namespaced_with(self.client.clone(), namespace, &kind.resource)
        } else {
            Api::all_with(self.client.clone(), &kind.resource)
        }
    }

    /// Re-applies one desired object as remembered (drift repair), if it drifted: it is read
    /// first, because the watch event that asked for the repair may be older than the apply's
    /// own write (a lagging watch delivers the previous apply's write after the next apply
    /// ended). Returns whether it was applied.
    pub(crate) async fn reapply(&self, object: &ObjectRef) -> Result<bool, Error> {
        let Some(owner) = self.state().objects.get(object).map(|d| d.owner.clone()) else {
            return self.delete_again(object).await;
        };
        let guard = self.description_lock(&owner);
        let _guard = guard.lock().await;
        // Read the wanted state only now: an apply may have changed it meanwhile.
        let Some(desired) = self.state().objects.get(object).cloned() else {
            return Ok(false);
        };
        let live = self
            .api(&desired.kind, &object.namespace)
            .get_opt(&object.name)
            .await
            .map_err(|source| Error::GetObject {
                object: object.to_string(),
                source,
            })?;
        if live.is_some_and(|live| {
            live.metadata.deletion_timestamp.is_some() || !desired.differs_from(&live)
        }) {
            return Ok(false);
        }
        let key = desired.owner.clone();
        let Some(config) = desired.config() else {
            return Ok(false);
        };
        let result = self
            .apply_one(
                &key,
                Prepared {
                    object: object.clone(),
                    config,
                },
                Some(desired.yielded.clone()),
            )
            .await;
        let mut state = self.state();
        match result {
            Ok(mut d) => {
                // Keep it only if the Description still wants it.
                if let Some(current) = state.objects.get_mut(object)
                    && current.owner == key
                {
                    d.yielded = merge_yielded(&current.yielded, &d.yielded);
                    d.release = current.release;
                    *current = d;
                }
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// Records that `object` of `owner` is being deleted (see [`State::deleted`]).
    fn remember_deleted(&self, owner: &str, object: &ObjectRef) {
        let mut state = self.state();
        let now = Timestamp::now();
        if state
            .deleted_swept
            .is_none_or(|swept| now.duration_since(swept) >= DELETED_SWEEP_EVERY)
        {
            state.deleted.retain(|_, (_, at)| remembered(*at));
            state.deleted_swept = Some(now);
        }
        state
            .deleted
            .insert(object.clone(), (owner.to_owned(), now));
    }

    /// The owner that deleted `object` lately, when no Description wants it now.
    fn deleted_by(&self, object: &ObjectRef) -> Option<String> {
        let state = self.state();
        if state.objects.contains_key(object) {
            return None;
        }
        state
            .deleted
            .get(object)
            .filter(|(_, at)| remembered(*at))
            .map(|(owner, _)| owner.clone())
    }

    /// Whether `live` is an object the applier deleted lately, back with the same owner while
    /// no Description wants it (see [`State::deleted`]).
    pub(crate) fn came_back(&self, object: &ObjectRef, live: &DynamicObject) -> bool {
        owner_of(live).is_some_and(|owner| self.deleted_by(object).as_deref() == Some(owner))
    }

    /// Deletes again an object that came back after the applier deleted it ([`Self::came_back`]),
    /// under its owner's lock: an apply that wants it again meanwhile keeps it. Returns whether
    /// it was deleted.
    async fn delete_again(&self, object: &ObjectRef) -> Result<bool, Error> {
        let Some(owner) = self.deleted_by(object) else {
            return Ok(false);
        };
        let guard = self.description_lock(&owner);
        let _guard = guard.lock().await;
        if self.deleted_by(object).as_ref() != Some(&owner) {
            return Ok(false);
        }
        let deleted = self.delete_object(&owner, object, false).await?;
        if deleted {
            tracing::warn!(%object, description = %owner, "an object deleted lately came back (a write sent before its deletion landed late); deleted it again");
        }
        Ok(deleted)
    }

    async fn wait_established(&self, name: &str) -> Result<(), Error> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let deadline = Instant::now() + ESTABLISHED_TIMEOUT;
        loop {
            if let Ok(Some(crd)) = api.get_opt(name).await {
                let established = crd
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                if established {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::WaitEstablished {
                    name: name.to_owned(),
                    seconds: ESTABLISHED_TIMEOUT.as_secs(),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Deletes one object if it is still ours; with `wait`, polls until it is gone. Returns
    /// whether there was one of ours to delete.
    async fn delete_object(
        &self,
        key: &str,
        object: &ObjectRef,
        wait: bool,
    ) -> Result<bool, Error> {
        let kind = match self
            .discovery
            .resolve(&object.api_version, &object.kind)
            .await
        {
            Ok(kind) => kind,
            // The kind is gone (its CRD was deleted): so is the object.
            Err(Error::ResolveKind { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let api = self.api(&kind, &object.namespace);
        let get_err = |source| Error::GetObject {
            object: object.to_string(),
            source,
        };
        let deadline = Instant::now() + self.delete_timeout;
        let mut delay = Duration::from_millis(50);
        // Whether the applier deleted it, and the uid of the object it deleted.
        let (mut deleting, mut deleted_uid) = (false, None);
        loop {
            let Some(live) = api.get_opt(&object.name).await.map_err(get_err)? else {
                return Ok(deleting);
            };
            // Until gone, the one deleted is waited for; an object created again since (a
            // late write of its owner's) is judged afresh, not waited for until the timeout.
            if !deleting || live.metadata.uid != deleted_uid {
                if owner_of(&live) != Some(key) {
                    tracing::info!(%object, "not deleting an object another owner took over");
                    return Ok(deleting);
                }
                self.remember_deleted(key, object);
                if live.metadata.deletion_timestamp.is_none() {
                    let params = DeleteParams {
                        propagation_policy: Some(PropagationPolicy::Background),
                        preconditions: live.metadata.uid.clone().map(|uid| {
                            kube::api::Preconditions {
                                uid: Some(uid),
                                resource_version: None,
                            }
                        }),
                        ..DeleteParams::default()
                    };
                    match api.delete(&object.name, &params).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(deleting),
                        Err(source) => {
                            return Err(Error::DeleteObject {
                                object: object.to_string(),
                                source,
                            });
                        }
                    }
                }
                (deleting, deleted_uid) = (true, live.metadata.uid);
                if !wait {
                    return Ok(true);
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::DeletionTimeout {
                    object: object.to_string(),
                    seconds: self.delete_timeout.as_secs(),
                });
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }

    /// Deletes every object of a Description (from memory and from its inventory) and waits
    /// until they are gone. The report says `deleted` only when all of them are.
    pub async fn delete(&self, namespace: &str, name: &str, uid: &str) -> Report {
        let report = self.delete_description(namespace, name, uid).await;
        self.sweep_removed().await;
        report
    }

    /// [`Applier::delete`], under the Description's lock.
    async fn delete_description(&self, namespace: &str, name: &str, uid: &str) -> Report {
        let key = atoll_crds::known::owned_by_description(namespace, name);
        let guard = self.description_lock(&key);
        let _guard = guard.lock().await;
        if let Err(e) = self.load_inventory().await {
            return deletion_report(name, uid, 0, vec![], Some(e.to_string()));
        }
        let (generation, orphan, mut refs) = {
            let mut state = self.state();
            let removed = state.descriptions.remove(&key);
            let generation = removed.as_ref().map_or(0, |d| d.generation);
            // The inventory remembers the policy when the agent restarted since the last apply.
            let orphan = removed.is_some_and(|d| d.orphan)
                || state.inventories.get(&key).is_some_and(|i| i.orphan);
            let mut refs: Vec<ObjectRef> = state
                .objects
                .iter()
                .filter(|(_, d)| d.owner == key)
                .map(|(r, _)| r.clone())
                .collect();
            state.objects.retain(|_, d| d.owner != key);
            if let Some(inv) = state.inventories.get(&key) {
                refs.extend(inv.objects.iter().map(|e| e.object.clone()));
            }
            (generation, orphan, refs)
        };
        if orphan {
            tracing::info!(description = %key, objects = refs.len(), "deletion policy Orphan: leaving the objects running, unmanaged");
            refs.clear();
        }
        // Releases first: Helm deletes their objects itself.
        let mut failures = Vec::new();
        let recorded = self.recorded_releases(&key);
        if !recorded.is_empty() {
            let plan = helm::ReleasePlan {
                charts: Vec::new(),
                intent: recorded.clone(),
            };
            let synced =
                helm::sync_releases(self.helm.as_ref(), plan, &recorded, orphan, false).await;
            failures.extend(
                synced
                    .reports
                    .iter()
                    .filter_map(|r| r.error.as_ref().map(|e| format!("{r}: {e}"))),
            );
            if let Err(e) = self
                .record_releases(&key, uid, orphan, synced.entries)
                .await
            {
                failures.push(e.to_string());
            }
        }
        refs.sort();
        refs.dedup();
        // Namespaced objects and custom resources before namespaces and CRDs.
        refs.sort_by_key(|r| match (r.group(), r.kind.as_str()) {
            ("", "Namespace") => 2,
            ("apiextensions.k8s.io", "CustomResourceDefinition") => 1,
            _ => 0,
        });
        let mut objects = Vec::new();
        for tier in 0..3 {
            let batch: Vec<ObjectRef> = refs
                .iter()
                .filter(|r| {
                    tier == match (r.group(), r.kind.as_str()) {
                        ("", "Namespace") => 2,
                        ("apiextensions.k8s.io", "CustomResourceDefinition") => 1,
                        _ => 0,
                    }
                })
                .cloned()
                .collect();
            let results: Vec<(ObjectRef, Result<bool, Error>)> = futures::stream::iter(batch)
                .map(|r: ObjectRef| {
                    let key = key.clone();
                    async move {
                        let result = self.delete_object(&key, &r, true).await;
                        (r, result)
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
            for (object, result) in results {
                let error = result.err().map(|e| e.to_string());
                if let Some(e) = &error {
                    failures.push(format!("{object}: {e}"));
                }
                objects.push(ObjectReport {
                    object,
                    status: None,
                    error,
                });
            }
        }
        if failures.is_empty() {
            // What it deleted stays in an inventory of its own while it is remembered: an
            // applier started meanwhile deletes again an object a late write brings back.
            let deleted = self.state().deleted_by_description(&key);
            let kept = !deleted.is_empty();
            let written = if kept {
                self.store
                    .write(&Inventory {
                        description: key.clone(),
                        uid: uid.to_owned(),
                        objects: Vec::new(),
                        releases: Vec::new(),
                        orphan,
                        deleted,
                        removed: true,
                    })
                    .await
            } else {
                self.store.delete(&key).await
            };
            if let Err(e) = written {
                failures.push(e.to_string());
            } else {
                let mut state = self.state();
                state.inventories.remove(&key);
                if kept {
                    state.removed.insert(key.clone(), Timestamp::now());
                }
            }
        }
        let reason = if failures.is_empty() {
            None
        } else {
            Some(failures.join("; "))
        };
        crate::metrics::count(
            &self.metrics.deletions,
            if reason.is_none() {
                "confirmed"
            } else {
                "pending"
            },
        );
        deletion_report(name, uid, generation, objects, reason)
    }

    /// Deletes the inventories of removed Descriptions ([`Inventory::removed`]) whose
    /// deletions are no longer remembered; one whose Description was applied again meanwhile
    /// is a live inventory again and stays.
    async fn sweep_removed(&self) {
        let expired: Vec<String> = {
            let mut state = self.state();
            let now = Timestamp::now();
            if state
                .removed_swept
                .is_some_and(|swept| now.duration_since(swept) < DELETED_SWEEP_EVERY)
            {
                return;
            }
            state.removed_swept = Some(now);
            state
                .removed
                .iter()
                .filter(|(_, at)| !remembered(**at))
                .map(|(key, _)| key.clone())
                .collect()
        };
        for key in expired {
            let guard = self.description_lock(&key);
            let _guard = guard.lock().await;
            let live = {
                let mut state = self.state();
                let live =
                    state.inventories.contains_key(&key) || state.descriptions.contains_key(&key);
                if live {
                    state.removed.remove(&key);
                }
                live
            };
            if live {
                continue;
            }
            match self.store.delete(&key).await {
                Ok(()) => {
                    self.state().removed.remove(&key);
                }
                Err(e) => {
                    tracing::warn!(description = %key, error = %e, "deleting the inventory of a removed Description failed; trying again later");
                }
            }
        }
    }

    /// After a snapshot: deletes the objects of every Description the applier knows (in memory
    /// or in its inventory) that is not in `keep` (owner keys), and the inventories of removed
    /// Descriptions whose deletions expired. Returns the pruned keys.
    pub async fn prune_except(&self, keep: &HashSet<String>) -> Result<Vec<String>, Error> {
        let plan = self.prune_plan(keep).await?;
        let pruned = self.prune(&plan).await;
        self.sweep_removed().await;
        Ok(pruned)
    }

    /// What [`prune_except`](Applier::prune_except) would delete: the Descriptions the applier
    /// knows (in memory or in its inventory) that are not in `keep`, with the objects each would
    /// delete, and how many objects it owns in all.
    pub async fn prune_plan(&self, keep: &HashSet<String>) -> Result<PrunePlan, Error> {
        self.load_inventory().await?;
        let state = self.state();
        // Each Description's objects (memory and inventory), and whether it orphans them.
        let mut owned: BTreeMap<&str, (HashSet<&ObjectRef>, bool)> = BTreeMap::new();
        for (key, d) in &state.descriptions {
            let (objects, orphan) = owned.entry(key).or_default();
            objects.extend(d.objects.iter().map(|(o, _)| o));
            *orphan |= d.orphan;
        }
        for (key, inv) in &state.inventories {
            let (objects, orphan) = owned.entry(key).or_default();
            objects.extend(inv.objects.iter().map(|e| &e.object));
            *orphan |= inv.orphan;
        }
        // Another agent's Descriptions (a shared state namespace) are not ours to prune.
        if let Some(scope) = &state.scope {
            owned.retain(|key, _| scope.covers(key));
        }
        // An object a kept Description holds (taken over from an earlier registration) is
        // not deleted with the stale one.
        let kept: HashSet<&ObjectRef> = owned
            .iter()
            .filter(|(key, _)| keep.contains(**key))
            .flat_map(|(_, (objects, _))| objects.iter().copied())
            .collect();
        let owned_objects = owned
            .values()
            .flat_map(|(objects, _)| objects.iter().copied())
            .collect::<HashSet<_>>()
            .len();
        let mut plan = PrunePlan {
            owned_objects,
            ..PrunePlan::default()
        };
        for (key, (objects, orphan)) in owned.iter().filter(|(k, _)| !keep.contains(**k)) {
            // Orphaned Descriptions are removed but delete nothing.
            let deleted = if *orphan {
                0
            } else {
                objects.iter().filter(|o| !kept.contains(**o)).count()
            };
            if state.scope.as_ref().is_some_and(|s| s.is_earlier(key)) {
                plan.earlier_registration_objects += deleted;
            }
            plan.stale.insert((*key).to_owned(), deleted);
        }
        Ok(plan)
    }

    /// Deletes the objects of the plan's Descriptions. Returns the keys fully pruned.
    pub async fn prune(&self, plan: &PrunePlan) -> Vec<String> {
        let mut pruned = Vec::new();
        for key in plan.stale.keys().cloned() {
            let Some((namespace, name)) = key.split_once('.') else {
                continue;
            };
            let report = self.delete(namespace, name, "").await;
            if report.deleted {
                pruned.push(key);
            } else {
                tracing::warn!(description = %key, reason = %report.reason, "prune incomplete");
            }
        }
        pruned
    }

    /// Forgets a Description without touching the child (used when its objects were deleted
    /// elsewhere).
    pub fn forget(&self, key: &str) {
        let mut state = self.state();
        state.descriptions.remove(key);
        state.objects.retain(|_, d| d.owner != key);
    }

    /// Rewrites an inventory that someone deleted, from memory.
    pub(crate) async fn restore_inventory(&self, key: &str) {
        let inv = self.state().inventories.get(key).cloned();
        if let Some(inv) = inv
            && self.state().descriptions.contains_key(key)
        {
            match self.store.write(&inv).await {
                Ok(()) => self.notify(Notice::InventoryLost(key.to_owned())),
                Err(e) => {
                    tracing::warn!(description = %key, error = %e, "restoring the inventory failed")
                }
            }
        }
    }

    /// Whether `object`'s Description is being applied (see [`State::applying`]); when it is
    /// and `hold`, `live` is held back until the apply ends.
    pub(crate) fn defer_while_applying(
        &self,
        object: &ObjectRef,
        live: &DynamicObject,
        hold: bool,
    ) -> bool {
        let mut state = self.state();
        if state.applying.is_empty() {
            return false;
        }
        // An object the apply creates is not recorded yet: its ownership annotation names it.
        let owner = state
            .objects
            .get(object)
            .map(|d| d.owner.clone())
            .or_else(|| owner_of(live).map(str::to_owned));
        let Some(owner) = owner else {
            return false;
        };
        match state.applying.get_mut(&owner) {
            Some(held) => {
                if hold {
                    held.insert(object.clone(), Box::new(live.clone()));
                }
                true
            }
            None => false,
        }
    }

    /// Ends the apply of `key`: the statuses the drift watchers saw meanwhile are recorded now
    /// (in order: newer observations may already wait in the channel, and a status replayed
    /// behind them would overwrite theirs, losing a ready Deployment's status for good), and
    /// their drift is judged again, against what the apply recorded.
    pub(crate) fn end_applying(&self, key: &str) {
        let held = self.state().applying.remove(key).unwrap_or_default();
        for (object, live) in held {
            self.observe_status(&object, &live);
            self.drift.replay(drift::Observation::Live {
                object,
                live,
                replayed: true,
            });
        }
    }

    /// Records the status of `live` as `object`'s, and tells the owner's report when it
    /// changed.
    pub(crate) fn observe_status(&self, object: &ObjectRef, live: &DynamicObject) {
        let status = status_of(live);
        let owner = {
            let mut state = self.state();
            let Some(d) = state.objects.get_mut(object) else {
                return;
            };
            if d.status == status {
                return;
            }
            d.status = status;
            d.owner.clone()
        };
        self.notify(Notice::ReportChanged(owner));
    }
}

/// The `.status` of a live object (`None` when it has none).
fn status_of(live: &DynamicObject) -> Option<Value> {
    live.data.get("status").filter(|s| !s.is_null()).cloned()
}

/// Whether an owner annotation names a Description of Clusternet's: `<namespace>.<base>-generic`.
/// atoll's own owners have two dots at least (`<namespace>.<subscription-namespace>.<name>`).
fn is_clusternet_owner(owner: &str) -> bool {
    owner.matches('.').count() == 1 && owner.ends_with("-generic")
}

fn merge_yielded(a: &[String], b: &[String]) -> Vec<String> {
    let mut out = a.to_vec();
    for y in b {
        if !out.contains(y) {
            out.push(y.clone());
        }
    }
    out
}

/// Fits an object and its configuration to its kind's scope: a namespaced object without a
/// namespace gets `default_namespace` (written into the configuration too), a cluster-scoped
/// one loses any namespace.
fn scope_to_kind(object: &mut ObjectRef, config: &mut Value, kind: &Kind, default_namespace: &str) {
    if kind.namespaced {
        if object.namespace.is_empty() {
            object.namespace = default_namespace.to_owned();
        }
        config["metadata"]["namespace"] = Value::String(object.namespace.clone());
    } else {
        object.namespace.clear();
        if let Some(meta) = config.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("namespace");
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn failure_report(desc: &Description, reason: &str) -> Report {
    Report {
        name: desc.name.clone(),
        uid: desc.uid.clone(),
        observed_generation: desc.generation,
        phase: Phase::Failure,
        reason: reason.to_owned(),
        objects: Vec::new(),
        releases: Vec::new(),
        deleted: false,
    }
}

fn deletion_report(
    name: &str,
    uid: &str,
    generation: i64,
    objects: Vec<ObjectReport>,
    failure: Option<String>,
) -> Report {
    Report {
        name: name.to_owned(),
        uid: uid.to_owned(),
        observed_generation: generation,
        phase: if failure.is_some() {
            Phase::Failure
        } else {
            Phase::Success
        },
        deleted: failure.is_none(),
        reason: failure.unwrap_or_default(),
        objects,
        releases: Vec::new(),
    }
}

/// The `(manager, field)` pairs of a 409 apply conflict.
pub(crate) fn conflicts_of(status: &kube::core::Status) -> Vec<(String, String)> {
    let Some(details) = status.details.as_ref() else {
        return Vec::new();
    };
    details
        .causes
        .iter()
        .filter(|c| c.reason == "FieldManagerConflict" && !c.field.is_empty())
        .map(|c| {
            let manager = c.message.split('"').nth(1).unwrap_or_default().to_owned();
            (manager, c.field.clone())
        })
        .collect()
}

/// Managers whose fields the agent leaves alone: those that declared ownership with
/// server-side apply (operation `Apply`, e.g. an autoscaler using SSA) and those that wrote
/// through a subresource other than `status` (`scale`: the HPA). Fields changed by plain
/// updates (`kubectl edit`, `kubectl patch`, creates) are drift and are taken back.
pub(crate) fn declared_owners(live: &DynamicObject, own_manager: &str) -> HashSet<String> {
    live.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            let subresource = m
                .subresource
                .as_deref()
                .is_some_and(|s| !s.is_empty() && s != "status");
            subresource || m.operation.as_deref() == Some("Apply")
        })
        .filter_map(|m| m.manager.clone())
        .filter(|m| m != own_manager)
        .collect()
}

/// Prepares every object of a Description for server-side apply. Returns the report order
/// (each object with its error when it cannot be applied) and the objects to apply. A
/// duplicate inside one Description fails; the first one wins.
fn prepare_all(desc: &Description, key: &str) -> Prepare {
    let mut order: Vec<(ObjectRef, Option<String>)> = Vec::with_capacity(desc.objects.len());
    let mut unique: Vec<Prepared> = Vec::with_capacity(desc.objects.len());
    let mut seen = HashSet::new();
    let mut unreadable = false;
    for (index, raw) in desc.objects.iter().enumerate() {
        match prepare(raw, index, key) {
            Ok(p) if seen.insert(p.object.clone()) => {
                order.push((p.object.clone(), None));
                unique.push(p);
            }
            Ok(p) => order.push((
                p.object,
                Some("the object appears twice in the Description".to_owned()),
            )),
            Err((object, e)) => {
                unreadable = true;
                order.push((object, Some(e)));
            }
        }
    }
    Prepare {
        order,
        objects: unique,
        unreadable,
    }
}

/// What becomes of the objects a Description applied before and no longer has.
#[derive(Clone, Copy, Debug)]
enum Dropped {
    /// Deleted from the cluster (a prune).
    Delete,
    /// Let go of, left in the cluster (an orphaning Description).
    Orphan,
    /// Kept, and kept in the inventory (some object of the Description cannot be read).
    Keep,
}

/// A Description's objects made ready to apply ([`prepare_all`]).
struct Prepare {
    /// Every object, in order, with its error when it cannot be applied.
    order: Vec<(ObjectRef, Option<String>)>,
    /// The objects to apply, each once.
    objects: Vec<Prepared>,
    /// Some object could not be read as one (no `apiVersion`, `kind` or name, not an object).
    unreadable: bool,
}

/// Splits the objects to apply into namespaces, CRDs and the rest, the order they are applied
/// in.
fn apply_order(objects: Vec<Prepared>) -> [Vec<Prepared>; 3] {
    let (namespaces, rest): (Vec<_>, Vec<_>) = objects
        .into_iter()
        .partition(|p| p.object.kind == "Namespace" && p.object.group().is_empty());
    let (crds, rest): (Vec<_>, Vec<_>) = rest.into_iter().partition(|p| {
        p.object.kind == "CustomResourceDefinition" && p.object.group() == "apiextensions.k8s.io"
    });
    [namespaces, crds, rest]
}

/// Validates and cleans one raw object: it must be an object with `apiVersion`, `kind` and
/// `metadata.name`. Server-populated metadata and `status` are dropped; the ownership
/// annotation and the managed-by label are added.
fn prepare(raw: &Value, index: usize, key: &str) -> Result<Prepared, (ObjectRef, String)> {
    let str_at = |ptr: &str| {
        raw.pointer(ptr)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let object = ObjectRef {
        api_version: str_at("/apiVersion"),
        kind: str_at("/kind"),
        namespace: str_at("/metadata/namespace"),
        name: str_at("/metadata/name"),
    };
    let fail = |what: String| {
        let mut shown = object.clone();
        if shown.name.is_empty() {
            shown.name = format!("<object #{index}>");
        }
        Err((shown, Error::InvalidObject(what).to_string()))
    };
    if !raw.is_object() {
        return fail(format!("object #{index} is not a JSON object"));
    }
    if object.api_version.is_empty() {
        return fail(format!("object #{index} has no apiVersion"));
    }
    if object.kind.is_empty() {
        return fail(format!("object #{index} has no kind"));
    }
    if object.name.is_empty() {
        return fail(format!(
            "object #{index} ({}) has no metadata.name",
            object.kind
        ));
    }
    if !raw.pointer("/metadata/labels").is_none_or(Value::is_object)
        || !raw
            .pointer("/metadata/annotations")
            .is_none_or(Value::is_object)
    {
        return fail(format!(
            "object #{index} has labels or annotations that are not maps"
        ));
    }
    let mut config = raw.clone();
    if let Some(map) = config.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = config.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "managedFields",
            "selfLink",
            "ownerReferences",
            "generateName",
        ] {
            meta.remove(field);
        }
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(
                ANNOTATION_OWNED_BY_DESCRIPTION.to_owned(),
                Value::String(key.to_owned()),
            );
            a.remove(ANNOTATION_ADOPT);
        }
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(l) = labels.as_object_mut() {
            l.insert(
                LABEL_MANAGED_BY.to_owned(),
                Value::String(MANAGED_BY_AGENT.to_owned()),
            );
        }
    }
    Ok(Prepared { object, config })
}

/// A digest of everything an apply of `desc` puts in place (its identity, objects, charts and
/// deletion policy), to tell a Description delivered again unchanged.
fn fingerprint(desc: &Description) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    (
        &desc.namespace,
        &desc.name,
        &desc.uid,
        desc.generation,
        desc.orphan,
    )
        .hash(&mut hasher);
    for object in &desc.objects {
        object.to_string().hash(&mut hasher);
    }
    desc.charts.len().hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_held_status_is_recorded_as_the_apply_ends_and_its_replay_overwrites_nothing() {
        // Found by the cold-start benchmark at 100,000 Descriptions: the status held during an
        // apply was replayed behind a newer observation already queued and overwrote it; a
        // Deployment ready in the child was reported without status for good.
        let cluster = devcluster::DevCluster::start(devcluster::Config::default())
            .await
            .unwrap();
        let applier = Arc::new(Applier::new(cluster.client().await.unwrap(), "atoll-agent"));
        let desc = Description {
            namespace: "clusternet-a".into(),
            name: "default.web".into(),
            uid: "uid-web".into(),
            generation: 1,
            orphan: false,
            charts: Vec::new(),
            objects: vec![json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "app", "image": "nginx"}]}}}})],
        };
        let report = applier.apply(&desc).await;
        assert_eq!(report.phase, Phase::Success, "{}", report.reason);
        let key = desc.key();
        let object = applier.state().objects.keys().next().cloned().unwrap();
        let live = |ready: i64| {
            Box::new(
                serde_json::from_value::<DynamicObject>(json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "web", "namespace": "default",
                        "annotations": {ANNOTATION_OWNED_BY_DESCRIPTION: key}},
                    "status": {"readyReplicas": ready}}))
                .unwrap(),
            )
        };
        let ready = || {
            applier.report(&key).and_then(|r| {
                r.objects
                    .first()?
                    .status
                    .as_ref()?
                    .get("readyReplicas")?
                    .as_i64()
            })
        };
        // Seen while the Description is applied: held, then recorded as the apply ends.
        applier.state().applying.insert(key.clone(), HashMap::new());
        assert!(applier.defer_while_applying(&object, &live(1), true));
        applier.end_applying(&key);
        assert_eq!(ready(), Some(1));
        // A newer observation queued ahead of the held one's replay: the newer one stays.
        let (tx, rx) = mpsc::unbounded_channel();
        for (ready, replayed) in [(2, false), (1, true)] {
            tx.send(drift::Observation::Live {
                object: object.clone(),
                live: live(ready),
                replayed,
            })
            .unwrap();
        }
        drop(tx);
        crate::repair::run(Arc::downgrade(&applier), rx, false).await;
        assert_eq!(ready(), Some(2));
    }

    /// Description `clusternet-a/default.app` holding `objects`.
    fn app(uid: &str, generation: i64, objects: Vec<Value>) -> Description {
        Description {
            namespace: "clusternet-a".into(),
            name: "default.app".into(),
            uid: uid.into(),
            generation,
            orphan: false,
            charts: Vec::new(),
            objects,
        }
    }

    /// ConfigMap `default/c` with `k: value`.
    fn config_map(value: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "default"}, "data": {"k": value}})
    }

    #[tokio::test]
    async fn an_older_generation_applied_late_does_not_replace_the_newer_one() {
        // Found by the chaos run: two background chart applies of one Description reached its
        // lock in the wrong order, and the release stayed at the older chart version.
        let cluster = devcluster::DevCluster::start(devcluster::Config::default())
            .await
            .unwrap();
        let client = cluster.client().await.unwrap();
        let applier = Applier::new(client.clone(), "atoll-agent");
        let desc =
            |uid: &str, generation: i64, value: &str| app(uid, generation, vec![config_map(value)]);
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(client.clone(), "default");
        let value = || async { cms.get("c").await.unwrap().data.unwrap()["k"].clone() };
        assert_eq!(
            applier.apply(&desc("uid-1", 2, "v2")).await.phase,
            Phase::Success
        );
        let late = applier.apply(&desc("uid-1", 1, "v1")).await;
        assert_eq!((late.phase, late.observed_generation), (Phase::Success, 2));
        assert_eq!(value().await, "v2");
        // A Description created again under the name (a new uid) starts its own generations.
        assert_eq!(
            applier.apply(&desc("uid-2", 1, "new")).await.phase,
            Phase::Success
        );
        assert_eq!(value().await, "new");
    }

    #[tokio::test]
    async fn an_unreadable_object_prunes_nothing_the_description_applied_before() {
        // Seen on the real tier: a Description's stored objects read back as `{}` (its CRD's
        // schema changed under it), and the agent pruned the ConfigMap they had held.
        let cluster = devcluster::DevCluster::start(devcluster::Config::default())
            .await
            .unwrap();
        let client = cluster.client().await.unwrap();
        let applier = Applier::new(client.clone(), "atoll-agent");
        let desc = |generation: i64, objects: Vec<Value>| app("uid-app", generation, objects);
        let cm = config_map("v");
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(client.clone(), "default");
        assert_eq!(
            applier.apply(&desc(1, vec![cm])).await.phase,
            Phase::Success
        );
        let unreadable = applier.apply(&desc(2, vec![json!({})])).await;
        assert_eq!(unreadable.phase, Phase::Failure);
        assert!(cms.get_opt("c").await.unwrap().is_some(), "pruned");
        // Once every object reads, what the Description dropped is pruned.
        assert_eq!(
            applier.apply(&desc(3, Vec::new())).await.phase,
            Phase::Success
        );
        assert!(cms.get_opt("c").await.unwrap().is_none(), "not pruned");
    }

    #[tokio::test]
    async fn a_repair_asked_for_by_a_stale_observation_writes_nothing() {
        // Found by CI under load: the watch event of an apply's write arrived after the next
        // apply ended, was judged against the newer configuration, and "repaired" an object
        // that was as wanted. A repair reads the object first.
        let cluster = devcluster::DevCluster::start(devcluster::Config::default())
            .await
            .unwrap();
        let client = cluster.client().await.unwrap();
        let applier = Arc::new(Applier::new(client.clone(), "atoll-agent"));
        let desc =
            |generation: i64, value: &str| app("uid-app", generation, vec![config_map(value)]);
        for (generation, value) in [(1, "v1"), (2, "v2")] {
            let report = applier.apply(&desc(generation, value)).await;
            assert_eq!(report.phase, Phase::Success, "{}", report.reason);
        }
        let object = applier.state().objects.keys().next().cloned().unwrap();
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(client.clone(), "default");
        let rv = |c: k8s_openapi::api::core::v1::ConfigMap| c.metadata.resource_version;
        let before = rv(cms.get("c").await.unwrap());
        // The stale observation (v1) asked for a repair: the object is as wanted, so no write.
        assert!(!applier.reapply(&object).await.unwrap());
        assert_eq!(rv(cms.get("c").await.unwrap()), before);
        // A real edit is repaired.
        cms.patch(
            "c",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"k": "hand edit"}})),
        )
        .await
        .unwrap();
        assert!(applier.reapply(&object).await.unwrap());
        let data = cms.get("c").await.unwrap().data.unwrap();
        assert_eq!(data.get("k").map(String::as_str), Some("v2"));
        // So is a deleted object.
        cms.delete("c", &Default::default()).await.unwrap();
        assert!(applier.reapply(&object).await.unwrap());
        assert!(cms.get_opt("c").await.unwrap().is_some());
    }

    #[test]
    fn prepare_rejects_objects_without_identity() {
        let cases = [
            (json!("text"), "not a JSON object"),
            (
                json!({"kind": "ConfigMap", "metadata": {"name": "a"}}),
                "no apiVersion",
            ),
            (
                json!({"apiVersion": "v1", "metadata": {"name": "a"}}),
                "no kind",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}),
                "no metadata.name",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": ["x"]}}),
                "not maps",
            ),
        ];
        for (raw, message) in cases {
            match prepare(&raw, 4, "ns.d") {
                Ok(_) => panic!("{raw} accepted"),
                Err((object, e)) => {
                    assert!(e.contains(message), "{e}");
                    assert!(!object.name.is_empty());
                }
            }
        }
    }

    #[test]
    fn prepare_marks_ownership_and_drops_server_fields() {
        let raw = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "x", "uid": "u", "resourceVersion": "7",
                          "annotations": {"apps.clusternet.io/adopt": "true", "keep": "me"}},
            "data": {"k": "v"}, "status": {"phase": "x"}
        });
        let p = prepare(&raw, 0, "clusternet-abcde.default.web").unwrap_or_else(|_| unreachable!());
        assert_eq!(p.object.namespace, "x");
        assert_eq!(
            p.config,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "x",
                    "annotations": {"keep": "me", "apps.clusternet.io/owned-by-description": "clusternet-abcde.default.web"},
                    "labels": {"apps.clusternet.io/managed-by": "atoll-agent"}},
                "data": {"k": "v"}
            })
        );
    }

    #[test]
    fn fields_are_left_to_managers_that_applied_or_wrote_through_a_subresource() {
        let live: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "managedFields": [
                {"manager": "atoll-agent", "operation": "Apply"},
                {"manager": "keda", "operation": "Apply"},
                {"manager": "horizontal-pod-autoscaler", "operation": "Update", "subresource": "scale"},
                {"manager": "kubectl-edit", "operation": "Update"},
                {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status"}
            ]}
        }))
        .unwrap_or_else(|_| unreachable!());
        let owners = declared_owners(&live, "atoll-agent");
        let mut owners: Vec<&str> = owners.iter().map(String::as_str).collect();
        owners.sort_unstable();
        assert_eq!(owners, vec!["horizontal-pod-autoscaler", "keda"]);
    }

    #[test]
    fn a_clusternet_owner_is_told_from_atolls_own() {
        for (owner, clusternet) in [
            ("clusternet-5l82l.web-generic", true),
            ("clusternet-5l82l.web-helm", false),
            ("clusternet-5l82l.default.web", false),
            ("clusternet-5l82l.default.web-generic", false),
            ("web-generic", false),
        ] {
            assert_eq!(is_clusternet_owner(owner), clusternet, "{owner}");
        }
    }

    #[test]
    fn conflicts_are_read_from_the_status_causes() {
        let status: kube::core::Status = serde_json::from_value(json!({
            "code": 409, "reason": "Conflict", "message": "Apply failed with 2 conflicts",
            "details": {"causes": [
                {"reason": "FieldManagerConflict", "message": "conflict with \"hpa\" using apps/v1", "field": ".spec.replicas"},
                {"reason": "FieldManagerConflict", "message": "conflict with \"kubectl-edit\"", "field": ".data.k"},
                {"reason": "Other", "message": "x", "field": ".y"}
            ]}
        }))
        .unwrap_or_else(|_| unreachable!());
        assert_eq!(
            conflicts_of(&status),
            vec![
                ("hpa".to_owned(), ".spec.replicas".to_owned()),
                ("kubectl-edit".to_owned(), ".data.k".to_owned())
            ]
        );
    }
}
