"""`genie testbed up|down|status|list|verify`: parse, call genie.testbed.service (or verify_run), print."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from genie.cli import options

from genie.core.errors import InputError
from genie.core.testbed import LinkModel, TestbedInfo
from genie.core.units import describe_rate
from genie.testbed import service
from genie.testbed.plan import RTO_MIN_US, describe_plan, rto_min_settable
from genie.testbed.service import DownReport
from genie.testbed.steps import ShaperChoice

app = typer.Typer(help="Emulated testbeds: network namespaces, veth links, bridges, routes and tc shaping.",
                  no_args_is_help=True)


@app.command("up")
def up_command(
    file: Path = typer.Argument(..., help="Topology YAML file (see docs/topology.md)."),
    name: Optional[str] = typer.Option(None, "--name", help="Testbed name (default: the file's stem)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan, change nothing."),
    shaper: ShaperChoice = typer.Option(ShaperChoice.AUTO, "--shaper", case_sensitive=False,
                                        help="How delay, jitter and loss are made: netem (sch_netem), userspace "
                                             "(NFQUEUE link emulator), or auto (netem where the kernel has it)."),
    time_dilation: Optional[str] = options.TIME_DILATION,
    links: Optional[LinkModel] = typer.Option(
        None, "--links", case_sensitive=False,
        help="wire: every packet serialized at its link's rate (no message beats the wire, at any size); bucket: "
             "HTB's token buckets only (cheapest; bursts of ~1 ms at line rate after idle). Default: wire on a "
             "dilated testbed or one with delays, else bucket (docs/dilation.md)."),
) -> None:
    """Build the topology as namespaces, veths, bridges, routes and qdiscs."""
    from genie.cli.flags import flag_names
    from genie.core.dilation import DilationChoice
    from genie.services.dilation_choice import testbed_up
    from genie.topology import load_topology_file

    topology = load_topology_file(file)
    testbed = name if name is not None else file.stem
    with flag_names({"time_dilation": "--time-dilation"}):
        result = testbed_up(topology, name=testbed, source=file, dry_run=dry_run, shaper=shaper,
                            choice=DilationChoice.parse(time_dilation), links=links)
    if isinstance(result, TestbedInfo):
        _print_up(result)
        return
    typer.echo(f"plan for testbed {testbed} ({len(result)} steps; dry run, nothing changed):")
    for line in describe_plan(result):
        typer.echo(line)


@app.command("down")
def down_command(
    name: Optional[str] = typer.Argument(None, help="Testbed to tear down."),
    all_testbeds: bool = typer.Option(False, "--all", help="Every testbed, plus leftover genie-* namespaces."),
    force: bool = typer.Option(False, "--force", help="Forget a corrupt or foreign state record of NAME and remove "
                                                      "only its genie-NAME-* namespaces; with --all, also tear "
                                                      "down testbeds in use."),
) -> None:
    """End the testbed's processes and remove everything it created. Exit code 1 when --all leaves a testbed up
    (in use, or its maker still runs: each named on stderr, with the reason)."""
    if (name is None) == (not all_testbeds):
        raise InputError("give a testbed NAME or --all (not both)", path="down")
    report = service.down_all(force=force) if all_testbeds else service.down(name, force=force)  # type: ignore[arg-type]
    _print_down(report)


@app.command("status")
def status_command(name: str = typer.Argument(..., help="Testbed name.")) -> None:
    """Namespaces, interfaces, addresses, qdiscs (with rates) and routes of a testbed."""
    state = service.status(name)
    info = state.info
    dead = [e for e in state.emulators if not e.running]
    health = ("BROKEN (link emulator not running: genie testbed down, then up)" if dead
              else "up" if state.complete else "INCOMPLETE")
    typer.echo(f"testbed {info.name}: {health}, shaping {info.shaper}, {info.links.value} links, "
               f"source {state.source or '-'}")
    if info.dilation.active:
        typer.echo(f"  {info.dilation.describe()}")
    for host in info.hosts:
        typer.echo(f"  host {host.host}: {host.address} in {host.netns}")
    for ns in state.namespaces:
        if not ns.present:
            typer.echo(f"{ns.netns}: MISSING")
            continue
        pids = ", ".join(map(str, ns.pids)) or "none"
        typer.echo(f"{ns.netns}  (processes: {pids})")
        for iface in ns.interfaces:
            parts = [f"  {iface.ifname:<5} {iface.kind:<8} {'up' if iface.up else 'down':<4} mtu {iface.mtu_bytes}"]
            parts += list(iface.addresses)
            if iface.master:
                parts.append(f"master {iface.master}")
            for q in iface.qdiscs:
                if q.kind == "noqueue":
                    continue
                rate = f" rate {describe_rate(q.rate_bps)}" if q.rate_bps else ""
                detail = f" {q.detail}" if q.detail else ""
                parts.append(f"qdisc {q.kind} {q.handle} parent {q.parent}{rate}{detail}")
            typer.echo("  ".join(parts))
        for route in ns.routes:
            typer.echo(f"    route {route.destination} {' | '.join(route.nexthops)}")
    for emulator in state.emulators:
        stats = emulator.stats or {}
        counts = (f"accepted {stats.get('accepted', '?')} dropped {stats.get('dropped', '?')} "
                  f"held {stats.get('held', '?')}, late median {stats.get('late_median_us', '?')}us")
        typer.echo(f"link emulator {emulator.netns} pid {emulator.pid}: "
                   f"{'running' if emulator.running else 'NOT RUNNING'}; {counts}")
        for stage, stage_counts in sorted((stats.get("stages") or {}).items()):
            typer.echo(f"    {stage}: " + " ".join(f"{k} {v}" for k, v in stage_counts.items()))


@app.command("verify")
def verify_command(
    name: str = typer.Argument(..., help="Testbed to measure."),
    csv_path: Optional[Path] = typer.Option(None, "--csv", help="Also write the table as CSV here (it is always in "
                                                                "the run directory)."),
    seconds: float = options.VERIFY_SECONDS,
    loss_probes: int = options.VERIFY_LOSS_PROBES,
    rtt_probes: int = options.VERIFY_RTT_PROBES,
    pair: Optional[list[str]] = options.VERIFY_PAIR,
    out: Optional[Path] = options.VERIFY_OUT,
    time_dilation: Optional[str] = options.TIME_DILATION,
) -> None:
    """Measure RTT, throughput and loss of every link (end to end between hosts) against its configuration."""
    from genie.cli.flags import flag_names
    from genie.core.dilation import DilationChoice
    from genie.services.verify import VerifyRequest, check_pairs, run_verify
    from genie.testbed.verify_run import VerifySettings

    settings = VerifySettings(bulk_seconds=seconds, rtt_probes=rtt_probes, loss_probes=loss_probes)
    with flag_names({"pairs": "--pair", "csv_path": "--csv", "out": "--out", "time_dilation": "--time-dilation"}):
        request = VerifyRequest(name, settings, check_pairs(pair) if pair else None, csv_path, out,
                                DilationChoice.parse(time_dilation))
        result = run_verify(request, progress=lambda line: typer.echo(line, err=True))
    print_verify(result)


def print_verify(result) -> None:
    """A verify result (testbed or lab, `genie.services.verify.VerifyResult`): its table and closing line;
    exit code 1 when a check failed."""
    from genie.testbed.verify import format_table

    for line in format_table(list(result.rows)):
        typer.echo(line)
    typer.echo(f"wrote {result.csv_path}: {len(result.rows)} measurements, {len(result.failed)} failed, "
               f"{len(result.ceilings)} at the machine's ceiling")
    if result.failed:
        raise typer.Exit(1)


@app.command("list")
def list_command() -> None:
    """Testbeds recorded in the state directory."""
    summaries = service.list_testbeds()
    corrupt = service.corrupt_testbeds()
    if not summaries and not corrupt:
        typer.echo("no testbeds")
        return
    typer.echo(f"{'NAME':<24} {'HOSTS':>5} {'LINKS':>5} {'SHAPER':<10} {'STATE':<10} SOURCE")
    for s in summaries:
        state = "up" if s.complete and s.namespaces_present == s.namespaces_planned else "incomplete"
        typer.echo(f"{s.name:<24} {s.hosts:>5} {s.links:>5} {s.shaper:<10} {state:<10} {s.source or '-'}")
    for name in corrupt:
        typer.echo(f"{name:<24} {'-':>5} {'-':>5} {'-':<10} {'corrupt':<10} "
                   f"(remove: genie testbed down {name} --force)")


def _print_up(info: TestbedInfo) -> None:
    typer.echo(f"testbed {info.name} is up: {len(info.hosts)} hosts, {len(info.topology.links)} links, "
               f"shaping {info.shaper}, {info.links.value} links")
    if info.dilation.active:
        typer.echo(f"  {info.dilation.describe()}: links shaped at rate/{info.dilation.factor:g}, delay "
                   f"x{info.dilation.factor:g}; runs on it report the topology's own time")
        if info.dilation.factor > 1 and not rto_min_settable():
            typer.echo(f"  note: this kernel has no {RTO_MIN_US} (Linux < 6.11): TCP's minimum RTO stays 200 ms "
                       f"real, {1000 * 0.2 / info.dilation.factor:g} ms of the fabric's time (docs/dilation.md)")
        for limit in info.dilation.limits:
            typer.echo(f"    {limit.name}: {limit.detail}")
    for host in info.hosts:
        typer.echo(f"  {host.host:<12} {host.address:<15} {host.netns}")
    typer.echo(f"tear down with: genie testbed down {info.name}")


def _print_down(report: DownReport) -> None:
    """What `down` did; exit code 1 when it left a testbed up (`down --all`: in use, or its maker still runs),
    each named on stderr with the reason."""
    for left in report.left_up:
        typer.echo(f"left testbed {left.name} up: {left.describe()}; `genie testbed down {left.name}` or "
                   f"`down --all --force` ends it", err=True)
    for netns in report.shared_namespaces:
        typer.echo(f"left {netns} alone: it is this machine's own network namespace, not one genie made", err=True)
    for netns in report.not_owned:
        typer.echo(f"left {netns} alone: no longer the namespace this testbed's `up` made (another testbed's?)",
                   err=True)
    if not report.testbeds and not report.orphan_namespaces and report.complete:
        typer.echo("nothing to tear down")
    for name in report.testbeds:
        typer.echo(f"testbed {name} is down")
    for netns in report.orphan_namespaces:
        typer.echo(f"removed leftover namespace {netns}")
    if report.pids_ended:
        typer.echo(f"ended {len(report.pids_ended)} processes: {' '.join(map(str, report.pids_ended))}")
    if not report.complete:
        raise typer.Exit(1)
