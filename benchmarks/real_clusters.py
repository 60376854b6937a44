"""genie's NCCL model against real nccl-tests output it did not see (issue 33): the corpus under
benchmarks/data/real-nccl/<case>/ (each run as posted, its README with the source, its topology.yaml).

Three held-out predictions, each the geometric mean of |time error| over the predicted sizes (fitted on each row's
faster pass, checked against the out-of-place time, nccl-tests' first column, as `genie calibrate` does):
- sizes: per run, fit on 3 sizes, predict every other size; reported apart for sizes >= 64 KiB and below, for two
  rules of picking the 3 sizes: the smallest, middle and largest row ("ends"), and the rows at 1/6, 1/2 and 5/6 of
  the sweep ("interior": a sweep's first row is often a warm-up outlier, e.g. 68 us against 25 us);
- collectives: per case with several collectives, fit on all_reduce (all sizes), predict the others;
- scale: per case with several node counts, fit on the fewest nodes, predict the others.
Then "are my numbers expected?" on every run, clean and anomalous.

    python -m benchmarks.real_clusters            # markdown tables
    python -m benchmarks.real_clusters --json     # the same numbers as JSON
    python -m benchmarks.real_clusters --readme-versions  # NCCL releases stated only in a case's README, too
    python -m benchmarks.real_clusters --readme-env  # NCCL settings documented only in a case's README, too
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from genie.core.collective import Collective
from genie.measure.nccl_output import NcclTable, parse_nccl_tests
from genie.topology import load_topology_file

from astra_adapter.nccl.expected import check
from astra_adapter.nccl.fit import Observation, fit, geomean_abs_error_pct, predict_all
from astra_adapter.nccl.hardware import Cluster, CpuVendor, Interconnect, NicPath, cluster_from_topology
from astra_adapter.nccl.model import nominal_params
from astra_adapter.nccl.env import env_from_output
from astra_adapter.nccl.observations import RowTime, table_observations, tables_nccl_version

DATA = Path(__file__).resolve().parent / "data" / "real-nccl"
SMALL_BYTES = 64 << 10


@dataclass(frozen=True)
class Case:
    name: str
    interconnect: Interconnect
    clean: bool  # False: the poster or a maintainer called it anomalous, or it is an unverified demo / suspect
    note: str = ""
    gpu: str | None = None  # for posts without `# Using devices` lines: the GPU the README names
    gpus_per_node: int | None = None  # likewise: the ranks per node the README names
    #: the NCCL release the case's README states where its output does not print one; used only with
    #: ``--readme-versions`` (genie calibrate knows only what an output prints)
    nccl_version: str = ""
    #: NCCL_* settings the case's README documents but its outputs do not print; used only with ``--readme-env``
    nccl_env: tuple[tuple[str, str], ...] = ()
    #: the node's GPU-NIC PCIe path and CPU vendor where its README's sources state them (as `genie calibrate
    #: --nic-path/--cpu`); the defaults are a DGX/HGX's (PXB, Intel)
    nic_path: NicPath = NicPath.PXB
    cpu: CpuVendor = CpuVendor.INTEL


CASES = (
    Case("nvidia-dgxc-dgxh100-8gpu-1node", Interconnect.NVSWITCH, True),
    Case("nccltests290-h100-8gpu-1node-nvls", Interconnect.NVSWITCH, True, "6 sizes, 2 iterations each"),
    Case("dudeperf3ct-h100x4-nvlink-lambda-1node", Interconnect.NVSWITCH, True, nccl_version="2.26.2"),
    Case("superbench-a100sxm4-40g-8gpu-1node", Interconnect.NVSWITCH, True, "test data of a benchmark suite"),
    Case("sheffield-stanage-a100sxm4-80g-4gpu-1node", Interconnect.NVLINK, True),
    Case("sheffield-bessemer-v100pcie-4gpu-1node-nccl2.4.2-cuda10.1", Interconnect.PCIE, True),
    Case("sheffield-bessemer-v100pcie-4gpu-1node-nccl2.8.3-cuda11.0.2", Interconnect.PCIE, True,
         nccl_version="2.8.3"),
    Case("sheffield-bessemer-v100pcie-4gpu-1node-nccl2.8.3-cuda11.1.1", Interconnect.PCIE, True,
         nccl_version="2.8.3"),
    Case("nccltests309-h100-ndr-2node-4node", Interconnect.NVSWITCH, True, "2 and 4 nodes are different machines"),
    Case("nccltests309-h100-ndr-gjaion-2-4-8node", Interconnect.NVSWITCH, True),
    Case("gcp-a3mega-h100-2node-tcpxo", Interconnect.NVSWITCH, True, "Ethernet, TCP plugin",
         nccl_env=(("NCCL_NVLS_ENABLE", "0"),)),
    Case("aws-batch-g5-a10g-2node-eth-socket", Interconnect.PCIE, True, "Ethernet, NCCL's socket transport"),
    Case("rtx6000d-cx8-2node-spcx", Interconnect.PCIE, True, "RoCE; provenance unverified, NIC speed assumed"),
    Case("oci-oke-bm-gpu4.8-a100-roce-2node", Interconnect.NVSWITCH, True, "RoCE; a vendor's example"),
    Case("redhat-openshift-dell-h200-spectrumx-2node", Interconnect.NVSWITCH, True,
         "RoCE (Spectrum-X); provenance unverified"),
    Case("gke-a3ultra-h200-roce-gib-dranet", Interconnect.NVSWITCH, False, "demo, nobody commented"),
    Case("gke-a4-b200-roce-gib-dranet", Interconnect.NVSWITCH, False, "demo, nobody commented"),
    Case("kalavai-rtx4090-pcie-docker-1node", Interconnect.PCIE, False, "suspect-low"),
    Case("kalavai-rtx4090-pcie-k8s-1node", Interconnect.PCIE, False, "suspect-low"),
    Case("nccltests290-h100-ndr-1node-2node-anomalous", Interconnect.NVSWITCH, False, "anomalous (2 nodes)"),
    Case("nccltests293-a100pcie-2node-hdr-anomalous", Interconnect.PCIE, False, "anomalous"),
    Case("nccltests319-h100-ndr-doca-2node-anomalous", Interconnect.NVSWITCH, False, "anomalous"),
    Case("aws-p4de-a100-efa-2node", Interconnect.NVSWITCH, True, "EFA; a vendor's example, no device lines",
         gpu="A100-SXM4-80GB", gpus_per_node=8),
    Case("aws-p5-h100-efa-2node", Interconnect.NVSWITCH, True, "EFA; a vendor's example, no device lines",
         gpu="H100 80GB HBM3", gpus_per_node=8),
    Case("aws-eks-g4dn-t4-2node-eth-socket", Interconnect.PCIE, True,
         "Ethernet, NCCL's socket transport; a vendor's example, instance type from the repo's config",
         gpu="Tesla T4", gpus_per_node=1),
    Case("aws-eks-g4dn-t4-2node-efa", Interconnect.PCIE, False,
         "EFA; suspect (a 0.73 GB/s plateau at 256 KiB - 1 MiB), instance type from the repo's config",
         gpu="Tesla T4", gpus_per_node=1),
    Case("moc-h100-roce-2node-nogdr-anomalous", Interconnect.NVSWITCH, False,
         "anomalous (GDR 0, ~15 GB/s on a 400G RoCE NIC)"),
    Case("gke-a3high-h100-2node-tcpx", Interconnect.NVSWITCH, True,
         "Ethernet, TCP plugin (GPUDirect-TCPX); all_gather; a vendor's example, no device lines",
         gpu="H100 80GB HBM3", gpus_per_node=8),
    Case("gke-a3mega-h100-2node-tcpxo-allgather", Interconnect.NVSWITCH, True,
         "Ethernet, TCP plugin (GPUDirect-TCPXO); all_gather; a vendor's example, no device lines",
         gpu="H100 80GB HBM3", gpus_per_node=8),
    Case("gke-a4-b200-2node-gib-allgather-readme", Interconnect.NVSWITCH, False,
         "RoCE (gIB); all_gather; a README sample later reused for another machine type: hardware uncertain",
         gpu="B200", gpus_per_node=8),
    Case("abci-anode-a100sxm4-hdr-2-4-8-16node", Interconnect.NVSWITCH, True,
         "InfiniBand HDR; all_reduce and broadcast on 2, 4, 8 and 16 nodes", nccl_version="2.8.4"),
    Case("abci-vnode-v100sxm2-edr-2-4-8-16-32node", Interconnect.NVLINK, True,
         "InfiniBand EDR; all_reduce on 2-32 nodes, broadcast on 2, 8, 16 and 32", nccl_version="2.8.4"),
    Case("abci-vnode-v100sxm2-edr-4node-broadcast-anomalous", Interconnect.NVLINK, False,
         "anomalous (broadcast busbw collapses from 7.06 to 1.97 GB/s above 2 MiB)", nccl_version="2.8.4"),
    Case("abci-vnode-v100sxm2-4gpu-1node", Interconnect.NVLINK, True, nccl_version="2.8.4"),
    Case("abci-anode-a100sxm4-40g-1node", Interconnect.NVSWITCH, True, nccl_version="2.8.4"),
    Case("abci-anode-a100sxm4-hdr-2node-sharp", Interconnect.NVSWITCH, True,
         "InfiniBand HDR with SHARP (NCCL_COLLNET_ENABLE=1, CollNet not modelled); a user guide's example",
         nccl_version="2.8"),
    Case("xxrjun-cluster01-h100-1gpn-2-10node", Interconnect.NVSWITCH, True,
         "1 GPU per node on 2 and 10 nodes; 5 collectives on 10; network not stated (400G NIC per GPU assumed)"),
    Case("xxrjun-cluster01-h100-10node-5collectives", Interconnect.NVSWITCH, True,
         "5 collectives on 10 nodes x 2/4/8 GPUs, alltoall/sendrecv on 2 x 8; network not stated (400G per GPU assumed)"),
    Case("xxrjun-cluster01-h100-8gpu-1node", Interconnect.NVSWITCH, True,
         "all_reduce, all_gather, reduce_scatter, alltoall, sendrecv on 4 and 8 GPUs of one node"),
    Case("alcf-polaris-a100-slingshot11-2-8-256-540node", Interconnect.NVLINK, True,
         "Slingshot-11 (aws-ofi-nccl); all_reduce, all_gather, alltoall on 2, 8, 256 and 540 nodes x 4 GPUs",
         nccl_version="2.21.5", nic_path=NicPath.PHB, cpu=CpuVendor.AMD),
    Case("snellius-h100-ndr200-2node", Interconnect.NVLINK, True,
         "4 x H100 (NVLink, no NVSwitch) + 4 x NDR200 per node; all_reduce (2 runs), all_gather, reduce_scatter"),
    Case("snellius-h100-4gpu-1node", Interconnect.NVLINK, True,
         "4 x H100 on NVLink without NVSwitch; all_reduce, all_gather, reduce_scatter"),
)


@dataclass(frozen=True)
class Run:
    file: str
    table: NcclTable
    observations: tuple[Observation, ...]  # out-of-place times: what predictions are checked against
    fit_observations: tuple[Observation, ...]  # each row's faster pass: what a calibration is fitted on


def load_case(case: Case, readme_versions: bool = False,
              readme_env: bool = False) -> tuple[Cluster, tuple[Run, ...]]:
    """A case's cluster and runs; the cluster's NCCL release is the one its outputs print (as `genie calibrate`
    reads it), or with ``readme_versions`` else the one its README states; its NCCL settings (NCCL_ALGO,
    NCCL_PROTO, NCCL_NVLS_ENABLE) those its outputs print, and with ``readme_env`` those its README documents."""
    folder = DATA / case.name
    runs = []
    tables = []
    printed: dict[str, str] = {}
    for path in sorted(folder.glob("*.txt")):
        for name, value in env_from_output(path.read_bytes()):
            printed.setdefault(name, value)
        for table in parse_nccl_tests(path.read_bytes(), source=str(path.relative_to(DATA))).tables:
            tables.append((path.name, table))
    gpu = case.gpu or next(d.gpu for _, t in tables for d in t.devices if d.gpu)
    cluster = cluster_from_topology(load_topology_file(folder / "topology.yaml"), gpu=gpu,
                                    interconnect=case.interconnect, source=str(folder / "topology.yaml"))
    version = tables_nccl_version([t for _, t in tables]) or (case.nccl_version if readme_versions else "")
    settings = {**printed, **(dict(case.nccl_env) if readme_env else {})}
    cluster = replace(cluster, nccl_version=version, nccl_env=tuple(settings.items()), nic_path=case.nic_path,
                      cpu=case.cpu)
    for name, table in tables:
        runs.append(Run(name, table, table_observations(table, cluster, gpus_per_node=case.gpus_per_node),
                        table_observations(table, cluster, gpus_per_node=case.gpus_per_node,
                                           time=RowTime.FASTER_PASS)))
    return cluster, tuple(runs)


def _geo(residuals) -> float | None:
    return geomean_abs_error_pct(residuals) if residuals else None


class Picks(Enum):
    """Which 3 sizes of a sweep the across-sizes prediction fits on."""

    ENDS = "ends"  # the smallest, the middle and the largest row
    INTERIOR = "interior"  # the rows at 1/6, 1/2 and 5/6 of the sweep (a first row is often a warm-up outlier)

    def rows(self, n: int) -> set[int]:
        if self is Picks.ENDS:
            return {0, n // 2, n - 1}
        return {round((n - 1) / 6), (n - 1) // 2, round(5 * (n - 1) / 6)}


def across_sizes(cluster: Cluster, run: Run, picks_rule: "Picks") -> dict:
    obs = sorted(run.observations, key=lambda o: o.call.size_bytes)
    fit_obs = sorted(run.fit_observations, key=lambda o: o.call.size_bytes)
    picks = picks_rule.rows(len(obs))
    train = [fit_obs[i] for i in sorted(picks)]
    rest = [o for i, o in enumerate(obs) if i not in picks]
    result = fit(cluster, train)
    residuals = predict_all(cluster, result.params, rest)
    large = [r for r in residuals if r.observation.call.size_bytes >= SMALL_BYTES]
    small = [r for r in residuals if r.observation.call.size_bytes < SMALL_BYTES]
    return {"run": run.file, "picks": picks_rule.value, "trained_sizes": [o.call.size_bytes for o in train],
            "predicted": len(rest), "geomean_all_pct": _geo(residuals),
            "geomean_ge_64k_pct": _geo(large), "geomean_lt_64k_pct": _geo(small),
            "worst_pct": max((abs(r.error_pct) for r in residuals), default=None)}


def across_collectives(cluster: Cluster, runs: tuple[Run, ...]) -> list[dict]:
    train = [o for r in runs if r.table.collective is Collective.ALL_REDUCE for o in r.fit_observations]
    others = [r for r in runs if r.table.collective is not Collective.ALL_REDUCE]
    if not train or not others:
        return []
    result = fit(cluster, train)
    out = []
    for r in others:
        residuals = predict_all(cluster, result.params, r.observations)
        large = [x for x in residuals if x.observation.call.size_bytes >= SMALL_BYTES]
        out.append({"run": r.file, "collective": r.table.collective.value, "geomean_pct": _geo(residuals),
                    "geomean_ge_64k_pct": _geo(large)})
    return out


def across_scale(cluster: Cluster, runs: tuple[Run, ...]) -> list[dict]:
    by_nodes: dict[int, list[Run]] = {}
    for r in runs:
        if r.observations and r.table.collective is Collective.ALL_REDUCE and "minctas" not in r.file \
                and "ring" not in r.file:
            by_nodes.setdefault(r.observations[0].call.nodes, []).append(r)
    if len(by_nodes) < 2:
        return []
    fewest = min(by_nodes)
    train = [o for r in by_nodes[fewest] for o in r.fit_observations]
    result = fit(cluster, train)
    out = []
    for nodes in sorted(by_nodes):
        if nodes == fewest:
            continue
        for r in by_nodes[nodes]:
            residuals = predict_all(cluster, result.params, r.observations)
            out.append({"run": r.file, "trained_nodes": fewest, "nodes": nodes, "geomean_pct": _geo(residuals)})
    return out


#: (case, its all_reduce output) of every single-node H100 sweep on NVSwitch, the machine ASTRA-sim's config describes
H100_SWEEPS = (("nvidia-dgxc-dgxh100-8gpu-1node", "all_reduce-8r.txt"),
               ("dudeperf3ct-h100x4-nvlink-lambda-1node", "all_reduce-4r.txt"),
               ("nccltests290-h100-8gpu-1node-nvls", "all_reduce-8r.txt"),
               ("xxrjun-cluster01-h100-8gpu-1node", "all_reduce-8r.txt"),
               ("xxrjun-cluster01-h100-8gpu-1node", "all_reduce-4r.txt"))


def beside_astra() -> list[dict]:
    """genie and ASTRA-sim's analytical model with its validated HGX-H100 config (benchmarks.astra_h100_baseline,
    through genie's built-in equal of the binaries) on the same H100 sweeps: genie fitted on 3 sizes of the sweep
    ("ends"), and genie fitted on a different H100 machine's whole sweep (ASTRA-sim's config, too, came from
    other H100s: the DGX H100 8-GPU sweep predicts the others, and is itself predicted from the 4-GPU one)."""
    import tempfile

    from astra_adapter.config import NetworkBackend
    from benchmarks.astra_h100_baseline import geomean_abs_pct, run_sweep

    loaded = {name: load_case(next(c for c in CASES if c.name == name)) for name, _ in H100_SWEEPS}
    donor = {name: ("dudeperf3ct-h100x4-nvlink-lambda-1node" if name == "nvidia-dgxc-dgxh100-8gpu-1node"
                    else "nvidia-dgxc-dgxh100-8gpu-1node") for name, _ in H100_SWEEPS}
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, file in H100_SWEEPS:
            cluster, runs = loaded[name]
            run = next(r for r in runs if r.file == file)
            sizes = across_sizes(cluster, run, Picks.ENDS)
            donor_cluster, donor_runs = loaded[donor[name]]
            donor_fit = fit(donor_cluster, donor_runs[0].fit_observations)
            other = _geo(predict_all(cluster, donor_fit.params, run.observations))
            points = run_sweep(f"{name}/{run.file}", Path(work) / run.file, configs=("validated",))
            astra = {b: geomean_abs_pct([p for p in points if p.backend is b]) for b in
                     (NetworkBackend.CONGESTION_UNAWARE, NetworkBackend.CONGESTION_AWARE)}
            rows.append({"case": name, "ranks": run.table.ranks, "sizes": len(run.observations),
                         "genie_3_sizes_pct": sizes["geomean_all_pct"],
                         "genie_other_machine_pct": other, "genie_other_machine": donor[name],
                         "astra_unaware_pct": astra[NetworkBackend.CONGESTION_UNAWARE],
                         "astra_aware_pct": astra[NetworkBackend.CONGESTION_AWARE]})
    return rows


def evaluate(readme_versions: bool = False, readme_env: bool = False) -> dict:
    report: dict = {"sizes": [], "collectives": [], "scale": [], "findings": []}
    for case in CASES:
        cluster, runs = load_case(case, readme_versions, readme_env)
        for run in runs:
            if len(run.observations) >= 4:
                for rule in Picks:
                    report["sizes"].append({"case": case.name, "clean": case.clean,
                                            **across_sizes(cluster, run, rule)})
        for row in across_collectives(cluster, runs):
            report["collectives"].append({"case": case.name, "clean": case.clean, **row})
        for row in across_scale(cluster, runs):
            report["scale"].append({"case": case.name, "clean": case.clean, **row})
        obs = tuple(o for r in runs for o in r.observations)
        for f in check(cluster, nominal_params(cluster), obs):
            report["findings"].append({"case": case.name, "clean": case.clean, "finding": f.describe()})
    report["astra"] = beside_astra()
    report["overall"] = {
        **{f"sizes_{rule.value}_{band}_pct": _gmean([r[f"geomean_{band}_pct"] for r in report["sizes"]
                                                      if r["clean"] and r["picks"] == rule.value])
           for rule in Picks for band in ("ge_64k", "lt_64k")},
        "collectives_pct": _gmean([r["geomean_pct"] for r in report["collectives"] if r["clean"]]),
        "scale_pct": _gmean([r["geomean_pct"] for r in report["scale"] if r["clean"]]),
    }
    return report


def _gmean(values: list[float | None]) -> float | None:
    v = [max(x, 0.01) for x in values if x is not None]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def markdown(report: dict) -> str:
    lines = ["### Across sizes (fit on 3 sizes, predict the rest): geomean |time error| %", "",
             "| case | run | clean | picks | trained sizes | predicted | >= 64 KiB | < 64 KiB | worst |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["sizes"]:
        lines.append(f"| {r['case']} | {r['run']} | {'yes' if r['clean'] else 'no'} | {r['picks']} | "
                     f"{', '.join(map(str, r['trained_sizes']))} | {r['predicted']} | "
                     f"{_pct(r['geomean_ge_64k_pct'])} | "
                     f"{_pct(r['geomean_lt_64k_pct'])} | {_pct(r['worst_pct'])} |")
    lines += ["", "### Across collectives (fit on all_reduce, predict the others)", "",
              "| case | run | clean | collective | all sizes | >= 64 KiB |", "|---|---|---|---|---|---|"]
    for r in report["collectives"]:
        lines.append(f"| {r['case']} | {r['run']} | {'yes' if r['clean'] else 'no'} | {r['collective']} | "
                     f"{_pct(r['geomean_pct'])} | {_pct(r['geomean_ge_64k_pct'])} |")
    lines += ["", "### Across scale (fit on the fewest nodes, predict more)", "",
              "| case | run | clean | trained nodes | nodes | geomean % |", "|---|---|---|---|---|---|"]
    for r in report["scale"]:
        lines.append(f"| {r['case']} | {r['run']} | {'yes' if r['clean'] else 'no'} | {r['trained_nodes']} | "
                     f"{r['nodes']} | {_pct(r['geomean_pct'])} |")
    lines += ["", "### Beside ASTRA-sim's validated HGX-H100 config (all sizes; ASTRA-sim published 9.69 % on 8 "
              "GPUs, 12.01 % on 4)", "",
              "| case | ranks | sizes | genie, fit on 3 sizes | genie, fit on another H100 machine | ASTRA-sim "
              "unaware | ASTRA-sim aware |", "|---|---|---|---|---|---|---|"]
    for r in report["astra"]:
        lines.append(f"| {r['case']} | {r['ranks']} | {r['sizes']} | {_pct(r['genie_3_sizes_pct'])} | "
                     f"{_pct(r['genie_other_machine_pct'])} ({r['genie_other_machine']}) | "
                     f"{_pct(r['astra_unaware_pct'])} | {_pct(r['astra_aware_pct'])} |")
    lines += ["", "### Are my numbers expected?", ""]
    lines += [f"- ({'clean' if r['clean'] else 'not clean'}) {r['finding']}" for r in report["findings"]]
    o = report["overall"]
    lines += ["", "**Overall (clean cases):** " + ", ".join(
        f"sizes ({rule.value}) >= 64 KiB {_pct(o[f'sizes_{rule.value}_ge_64k_pct'])} %, < 64 KiB "
        f"{_pct(o[f'sizes_{rule.value}_lt_64k_pct'])} %" for rule in Picks)
        + f", collectives {_pct(o['collectives_pct'])} %, scale {_pct(o['scale_pct'])} %"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--readme-env", action="store_true",
                        help="apply the NCCL settings only a case's README documents (not printed in its outputs)")
    parser.add_argument("--readme-versions", action="store_true",
                        help="model a case whose outputs print no NCCL release with the one its README states")
    args = parser.parse_args(argv)
    report = evaluate(args.readme_versions, args.readme_env)
    print(json.dumps(report, indent=1) if args.json else markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
