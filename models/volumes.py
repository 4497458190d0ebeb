"""Persistent volumes as the placement sees them: what each pod's claims ask of its node.

Read from PersistentVolume, PersistentVolumeClaim and StorageClass objects (``kubectl get
nodes,pods,pv,pvc,storageclasses -A -o yaml``). Pure: it decides nothing about nodes; each claim
becomes a ``VolumeNeed`` whose rule the solver and the checker evaluate against nodes:

* ``bound``: the claim names its PV; the pod goes only where the PV's node affinity allows.
* ``local``: unbound, of a ``WaitForFirstConsumer`` class without a provisioner; the node needs
  one of the free PVs listed (class, access modes, capacity match), one PV per claim.
* ``zonal``: unbound, ``WaitForFirstConsumer`` with a provisioner; the class's
  ``allowedTopologies`` restrict the nodes (none: anywhere).
* ``held``: the pod cannot be placed now (an ``Immediate`` claim not bound yet, a missing PV or
  class); the reason says why.

A claim that does not exist yet gives no need: a StatefulSet creates its claims before its pods,
so a pending pod whose claim is missing is placed as if it had no volume, with a warning.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from models.base import Value
from models.cluster import (
    FreeVolume,
    Pod,
    SelectorRequirement,
    SelectorTerm,
    VolumeNeed,
    VolumeRule,
)
from models.errors import InputError
from models.quantity import QuantityError, memory_bytes
from models.snapshot import Issue

NO_PROVISIONER = "kubernetes.io/no-provisioner"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
"""The claim annotation that tells the provisioner or PV controller which node the pod took."""
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
FREE_PHASES = frozenset({"Available"})
"""PV phases in which a PV bound to no claim can take one, as kube-scheduler reads them: a PV
just created is Pending until the PV controller marks it Available, and a Released or Failed
PV takes no new claim."""
KINDS = frozenset({"PersistentVolume", "PersistentVolumeClaim", "StorageClass"})


class StorageClass(Value):
    name: str
    provisioner: str = ""
    wait_for_consumer: bool = False
    default: bool = False
    terms: tuple[SelectorTerm, ...] = ()


class Claim(Value):
    namespace: str
    name: str
    storage_class: str | None
    """None: no class named (the default class applies); "": explicitly no class."""
    volume_name: str | None = None
    phase: str = "Pending"
    access_modes: tuple[str, ...] = ()
    request: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Volume(Value):
    name: str
    storage_class: str
    capacity: int
    access_modes: tuple[str, ...] = ()
    terms: tuple[SelectorTerm, ...] = ()
    claim: str | None = None
    """``namespace/name`` of the claim it is bound (or pre-bound) to."""
    phase: str = "Pending"
    deleting: bool = False


def claim_names(spec: Mapping[str, Any], pod_name: str) -> tuple[str, ...]:
    """The claims a pod spec mounts: persistentVolumeClaim volumes and generic ephemeral ones
    (whose claim Kubernetes names ``<pod>-<volume>``)."""
    names = []
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, Mapping):
            continue
        pvc = volume.get("persistentVolumeClaim")
        if isinstance(pvc, Mapping) and pvc.get("claimName"):
            names.append(str(pvc["claimName"]))
        elif isinstance(volume.get("ephemeral"), Mapping) and volume.get("name"):
            names.append(f"{pod_name}-{volume['name']}")
    return tuple(names)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _where(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    kind = {"PersistentVolume": "pv", "PersistentVolumeClaim": "pvc"}.get(
        str(obj.get("kind")), str(obj.get("kind", "object")).lower()
    )
    ns = meta.get("namespace")
    name = meta.get("name", "<unnamed>")
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


def _storage(raw: object, where: str, field: str) -> int:
    if raw is None:
        return 0
    try:
        return memory_bytes(raw)
    except QuantityError as exc:
        raise InputError(str(exc), obj=where, field=field) from None


def _requirement(raw: object, where: str, field: str, operator: str | None) -> SelectorRequirement:
    if not isinstance(raw, Mapping) or "key" not in raw:
        raise InputError("needs a key", obj=where, field=field)
    op = operator or str(raw.get("operator") or "")
    if op not in {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}:
        raise InputError(f"unknown operator {op!r}", obj=where, field=field)
    values = tuple(str(v) for v in raw.get("values") or [])
    return SelectorRequirement(key=str(raw["key"]), operator=op, values=values)


def _terms(
    raw: object, where: str, field: str, fixed_operator: str | None = None
) -> tuple[SelectorTerm, ...]:
    """nodeSelectorTerms (or, with ``fixed_operator="In"``, a class's topology terms)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InputError("must be a list", obj=where, field=field)
    terms = []
    expressions = "matchLabelExpressions" if fixed_operator else "matchExpressions"
    for i, term in enumerate(raw):
        if not isinstance(term, Mapping):
            raise InputError("must be a mapping", obj=where, field=f"{field}[{i}]")
        exprs = tuple(
            _requirement(r, where, f"{field}[{i}].{expressions}[{j}]", fixed_operator)
            for j, r in enumerate(term.get(expressions) or [])
        )
        fields = tuple(
            _requirement(r, where, f"{field}[{i}].matchFields[{j}]", None)
            for j, r in enumerate(term.get("matchFields") or [])
        )
        terms.append(SelectorTerm(match_expressions=exprs, match_fields=fields))
    return tuple(terms)


def _modes(raw: object) -> tuple[str, ...]:
    return tuple(sorted(str(m) for m in raw)) if isinstance(raw, list) else ()


def parse_storage_class(obj: Mapping[str, Any]) -> StorageClass:
    where, meta = _where(obj), _meta(obj)
    if not meta.get("name"):
        raise InputError("metadata.name is missing", obj=where)
    annotations = meta.get("annotations") or {}
    return StorageClass(
        name=str(meta["name"]),
        provisioner=str(obj.get("provisioner") or ""),
        wait_for_consumer=obj.get("volumeBindingMode") == "WaitForFirstConsumer",
        default=str(annotations.get(DEFAULT_CLASS, "")).lower() == "true",
        terms=_terms(obj.get("allowedTopologies"), where, "allowedTopologies", "In"),
    )


def parse_claim(obj: Mapping[str, Any]) -> Claim:
    where, meta = _where(obj), _meta(obj)
    if not meta.get("name"):
        raise InputError("metadata.name is missing", obj=where)
    spec = obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    cls = spec.get("storageClassName")
    if cls is None and BETA_CLASS in annotations:
        cls = annotations[BETA_CLASS]
    requests = (spec.get("resources") or {}).get("requests") or {}
    return Claim(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        storage_class=None if cls is None else str(cls),
        volume_name=str(spec["volumeName"]) if spec.get("volumeName") else None,
        phase=str((obj.get("status") or {}).get("phase") or "Pending"),
        access_modes=_modes(spec.get("accessModes")),
        request=_storage(requests.get("storage"), where, "spec.resources.requests.storage"),
    )


def parse_volume(obj: Mapping[str, Any]) -> Volume:
    where, meta = _where(obj), _meta(obj)
    if not meta.get("name"):
        raise InputError("metadata.name is missing", obj=where)
    spec = obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    ref = spec.get("claimRef") or {}
    required = (spec.get("nodeAffinity") or {}).get("required") or {}
    return Volume(
        name=str(meta["name"]),
        storage_class=str(spec.get("storageClassName") or annotations.get(BETA_CLASS) or ""),
        capacity=_storage(
            (spec.get("capacity") or {}).get("storage"), where, "spec.capacity.storage"
        ),
        access_modes=_modes(spec.get("accessModes")),
        terms=_terms(
            required.get("nodeSelectorTerms"),
            where,
            "spec.nodeAffinity.required.nodeSelectorTerms",
        ),
        claim=f"{ref.get('namespace') or 'default'}/{ref['name']}" if ref.get("name") else None,
        phase=str((obj.get("status") or {}).get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
    )


class VolumeObjects:
    """The PVs, claims and classes of one snapshot, and the needs they give each pod."""

    def __init__(self) -> None:
        self.classes: dict[str, StorageClass] = {}
        self.claims: dict[str, Claim] = {}
        self.volumes: dict[str, Volume] = {}
        self._free: tuple[FreeVolume, ...] | None = None
        self._rules: dict[tuple[str, int, tuple[str, ...]], VolumeRule] = {}

    def add(self, obj: Mapping[str, Any]) -> None:
        """Read one PersistentVolume, PersistentVolumeClaim or StorageClass object."""
        kind = obj.get("kind")
        self._free = None
        if kind == "StorageClass":
            cls = _checked(parse_storage_class, obj)
            self.classes[cls.name] = cls
        elif kind == "PersistentVolumeClaim":
            claim = _checked(parse_claim, obj)
            if claim.key in self.claims:
                raise InputError("appears twice", obj=f"pvc {claim.key}")
            self.claims[claim.key] = claim
        else:
            volume = _checked(parse_volume, obj)
            if volume.name in self.volumes:
                raise InputError("appears twice", obj=f"pv {volume.name}")
            self.volumes[volume.name] = volume

    def free_volumes(self) -> tuple[FreeVolume, ...]:
        """Available PVs that no claim holds, by name (worked out once)."""
        if self._free is None:
            self._free = self._free_volumes()
        return self._free

    def _free_volumes(self) -> tuple[FreeVolume, ...]:
        return tuple(
            FreeVolume(
                name=v.name,
                storage_class=v.storage_class,
                capacity=v.capacity,
                access_modes=v.access_modes,
                terms=v.terms,
            )
            for v in sorted(self.volumes.values(), key=lambda v: v.name)
            if v.claim is None and v.phase in FREE_PHASES and not v.deleting
        )

    def attach(self, pods: dict[str, Pod], issues: list[Issue]) -> None:
        """Give every pod that mounts claims its ``volumes`` (in place in ``pods``)."""
        free = self.free_volumes()
        prebound = {v.claim: v for v in self.volumes.values() if v.claim is not None}
        for key, pod in pods.items():
            if not pod.claims:
                continue
            needs = []
            for name in pod.claims:
                claim = self.claims.get(f"{pod.namespace}/{name}")
                if claim is None:
                    if pod.pending:
                        issues.append(
                            Issue(
                                object=f"pod {pod.key}",
                                message=f"claim {pod.namespace}/{name} is not in the snapshot: "
                                "placed as if the volume put no constraint on the node",
                                severity="warning",
                            )
                        )
                    continue
                needs.append(self.need(claim, free, prebound.get(claim.key)))
            pods[key] = pod.model_copy(update={"volumes": tuple(needs)})

    def default_class(self) -> StorageClass | None:
        defaults = sorted((c for c in self.classes.values() if c.default), key=lambda c: c.name)
        return defaults[0] if defaults else None

    def need(self, claim: Claim, free: Iterable[FreeVolume], prebound: Volume | None) -> VolumeNeed:
        """What one claim asks of its pod's node."""
        name = claim.volume_name or (prebound.name if prebound is not None else None)
        if name is not None:
            volume = self.volumes.get(name)
            if volume is None:
                return _held(claim, f"is bound to pv {name}, which is not in the snapshot")
            return VolumeNeed(
                claim=claim.key, volume=name, rule=VolumeRule(kind="bound", terms=volume.terms)
            )
        if claim.storage_class == "":
            return _held(claim, "names no storage class and is not bound yet")
        cls = (
            self.classes.get(claim.storage_class)
            if claim.storage_class is not None
            else self.default_class()
        )
        if cls is None:
            missing = claim.storage_class or "(the default class)"
            return _held(claim, f"names storage class {missing}, which is not in the snapshot")
        if not cls.wait_for_consumer:
            return _held(
                claim,
                f"(storage class {cls.name}, volumeBindingMode Immediate) is not bound yet",
            )
        if cls.provisioner == NO_PROVISIONER:
            wanted = (cls.name, claim.request, claim.access_modes)
            rule = self._rules.get(wanted)
            if rule is None:  # one rule per kind of claim: pods asking alike share it
                matching = tuple(
                    v
                    for v in free
                    if v.storage_class == cls.name
                    and v.capacity >= claim.request
                    and set(claim.access_modes) <= set(v.access_modes)
                )
                rule = self._rules[wanted] = VolumeRule(
                    kind="local", pool=cls.name, volumes=matching
                )
            return VolumeNeed.model_construct(claim=claim.key, volume=None, rule=rule)
        return VolumeNeed(claim=claim.key, rule=VolumeRule(kind="zonal", terms=cls.terms))


def _held(claim: Claim, why: str) -> VolumeNeed:
    return VolumeNeed(
        claim=claim.key,
        rule=VolumeRule(kind="held", reason=f"claim {claim.key} {why}"),
    )


def _checked(parse: Any, obj: Mapping[str, Any]) -> Any:
    try:
        return parse(obj)
    except InputError:
        raise
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        raise InputError(f"malformed object ({exc})", obj=_where(obj)) from None
