"""Derive the sample Backstage catalog (catalog-info.yaml beside this file) from the sample corpus' upstream sources.

Run by hand, never by the pipeline: ``python data/catalog/derive_catalog.py <opentelemetry-demo checkout>
<microservices-demo checkout>``. One Component per service: the OpenTelemetry demo's from ``compose.yaml``
(``dependsOn`` from ``depends_on``), Online Boutique's from ``kubernetes-manifests/*.yaml`` (``dependsOn`` from the
``*_ADDR`` environment variables), in namespace ``online-boutique`` because both systems have a ``frontend``. A
service's title is the first heading of its README when it has one. Both sources are Apache-2.0 (LICENSE files in
data/corpus/otel-demo and data/corpus/online-boutique).

Owners, teams and runbook links are ILLUSTRATIVE (the upstream projects name none): ``OPERATIONS`` below writes
them as an operator would for these services (see README.md here). ``python data/catalog/derive_catalog.py
--operations-only`` re-applies them to the catalog as it stands, without the upstream checkouts.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

HEADER = "# Derived by derive_catalog.py from the OpenTelemetry demo's compose.yaml and Online Boutique's manifests.\n"


def readme_title(readme: Path, name: str) -> str:
    if readme.is_file():
        for line in readme.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    return name.replace("-", " ").title()


def otel_components(root: Path) -> list[dict]:
    services = yaml.safe_load((root / "compose.yaml").read_text(encoding="utf-8"))["services"]
    components = []
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        components.append({
            "apiVersion": "backstage.io/v1alpha1", "kind": "Component",
            "metadata": {"name": name, "title": readme_title(root / "src" / name / "README.md", name)},
            "spec": {"type": "service", "lifecycle": "production", "system": "otel-demo",
                     **({"dependsOn": [f"component:{d}" for d in sorted(depends)]} if depends else {})},
        })
    return components


def boutique_components(root: Path) -> list[dict]:
    components = []
    deployments = {}
    for manifest in sorted((root / "kubernetes-manifests").glob("*.yaml")):
        for document in yaml.safe_load_all(manifest.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == "Deployment":
                deployments[document["metadata"]["name"]] = document
    for name, deployment in deployments.items():
        addresses = [env.get("value", "") for container in deployment["spec"]["template"]["spec"]["containers"]
                     for env in container.get("env", []) if env.get("name", "").endswith("_ADDR")]
        targets = sorted({re.split(r"[:.]", address)[0] for address in addresses} & set(deployments) - {name})
        components.append({
            "apiVersion": "backstage.io/v1alpha1", "kind": "Component",
            "metadata": {"name": name, "namespace": "online-boutique"},
            "spec": {"type": "service", "lifecycle": "production", "system": "online-boutique",
                     **({"dependsOn": [f"component:online-boutique/{t}" for t in targets]} if targets else {})},
        })
    return components


# Illustrative operations data: which team owns what, how to reach it, which runbooks apply.
RUNBOOKS = "https://runbooks.prometheus-operator.dev/runbooks/"
TEAMS = {
    "team-storefront": {"email": "storefront@example.com", "slack": "#storefront-oncall", "pagerduty": "PSTORE1",
                        "services": ["frontend", "frontend-proxy", "image-provider", "ad", "recommendation",
                                     "product-catalog"]},
    "team-orders": {"email": "orders@example.com", "slack": "#orders-oncall", "pagerduty": "PORDER1",
                    "services": ["checkout", "cart", "payment", "currency", "shipping", "quote", "email"]},
    "team-platform": {"email": "platform@example.com", "slack": "#platform-oncall", "pagerduty": "PPLAT01",
                      "services": ["valkey-cart", "astronomy-db", "otel-collector", "flagd", "flagd-ui",
                                   "load-generator", "telemetry-docs"]},
    "team-boutique": {"email": "boutique@example.com", "slack": "#boutique-oncall", "pagerduty": "PBOUT01",
                      "services": [f"online-boutique/{name}" for name in (
                          "frontend", "adservice", "recommendationservice", "productcatalogservice", "checkoutservice",
                          "cartservice", "paymentservice", "currencyservice", "shippingservice", "emailservice",
                          "redis-cart", "loadgenerator")]},
}
DATASTORES = {"valkey-cart", "astronomy-db", "online-boutique/redis-cart"}


# The customer-facing path (tier 1) and the datastores have runbooks linked; the rest, as in many catalogs, none.
TIER_ONE = {"frontend", "checkout", "payment"}


def runbook_links(service: str) -> list[dict]:
    """A tier-1 service runs as a Kubernetes Deployment: the pod and rollout runbooks apply; a datastore's volume
    runbook applies to it."""
    alerts = ["KubePodCrashLooping", "KubeDeploymentReplicasMismatch"] if service in TIER_ONE else []
    if service in DATASTORES:
        alerts.append("KubePersistentVolumeFillingUp")
    return [{"url": f"{RUNBOOKS}kubernetes/{alert.lower()}/", "title": f"Runbook: {alert}", "type": "runbook"}
            for alert in alerts]


def with_operations(components: list[dict]) -> list[dict]:
    """The components with their owner and runbook links, then the owning teams as Group entities."""
    owner = {service: team for team, spec in TEAMS.items() for service in spec["services"]}
    for component in components:
        metadata, spec = component["metadata"], component["spec"]
        name = f"{metadata['namespace']}/{metadata['name']}" if metadata.get("namespace") else metadata["name"]
        metadata.pop("links", None)
        spec.pop("owner", None)
        if name in owner:
            spec["owner"] = f"group:default/{owner[name]}"
            if links := runbook_links(name):
                metadata["links"] = links
    groups = [{"apiVersion": "backstage.io/v1alpha1", "kind": "Group",
               "metadata": {"name": team, "annotations": {"slack.com/channel": spec["slack"],
                                                          "pagerduty.com/service-id": spec["pagerduty"]}},
               "spec": {"type": "team", "profile": {"email": spec["email"]}, "children": []}}
              for team, spec in TEAMS.items()]
    return [c for c in components if c["kind"] == "Component"] + groups


def write(components: list[dict]) -> None:
    text = HEADER + "".join("---\n" + yaml.safe_dump(c, sort_keys=False) for c in with_operations(components))
    (Path(__file__).parent / "catalog-info.yaml").write_text(text, encoding="utf-8")


def main(otel_root: str, boutique_root: str) -> None:
    write(otel_components(Path(otel_root)) + boutique_components(Path(boutique_root)))


if __name__ == "__main__":
    if sys.argv[1:] == ["--operations-only"]:
        write(list(yaml.safe_load_all((Path(__file__).parent / "catalog-info.yaml").read_text(encoding="utf-8"))))
    else:
        main(*sys.argv[1:])
