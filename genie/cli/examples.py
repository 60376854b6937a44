"""An example for every command's --help (its epilog), paths relative to a checkout of the repository. The
offline ones (no root, no testbed) are the README's too, and tests/test_readme_examples.py runs them."""

from __future__ import annotations

from typing import Any

EXAMPLES: dict[str, tuple[str, ...]] = {
    "bench": ("genie bench --loopback --ranks 4 -b 1K -e 1M -f 2",
              "genie bench --loopback -g 2 -b 8 -e 1M -J all_reduce.json | grep '# Avg bus bandwidth'",
              "genie bench --topology topologies/star-4.yaml --collective all_gather,all_to_all -n 50",
              "genie bench --loopback --osu latency -b 4 -e 64K -f 4",
              "genie bench --testbed star-8 -b 1M -e 256M --interval 1"),
    "replay": ("genie replay traces/tp2_dp2_step.yaml --loopback -n 3",
               "genie replay traces/tp2_dp2_step.yaml --testbed star-8 --faults faults/star-8-flap.yaml",
               "genie replay traces/gen_tp2_dp4_gpt3 --topology topologies/star-8.yaml -n 3"),
    "diagnose": ("genie diagnose --testbed star-8 --size 8M",),
    "estimate": ("genie estimate traces/tp2_dp2_step.yaml --measurements runs/step-sweep "
                 "--measurements runs/step-ar --measurements runs/step-p2p",
                 "genie estimate traces/gen_tp2_dp4_gpt3 --measurements runs/star8-ar4 --extrapolate "
                 "--topology topologies/star-8.yaml"),
    "experiment": ("genie experiment experiments/tp2dp4-gpt3-star8.yaml",),
    "calibrate": ("genie calibrate benchmarks/data/real-nccl/nvidia-dgxc-dgxh100-8gpu-1node/all_reduce-8r.txt "
                  "--topology benchmarks/data/real-nccl/nvidia-dgxc-dgxh100-8gpu-1node/topology.yaml",
                  "genie calibrate ar-2node.txt --topology cluster.yaml --predict ar-4node.txt --out runs/cal"),
    "testbed up": ("genie testbed up topologies/star-8.yaml",
                   "genie testbed up topologies/leaf-spine-2x4.yaml --dry-run"),
    "testbed down": ("genie testbed down star-8", "genie testbed down --all"),
    "testbed status": ("genie testbed status star-8",),
    "testbed verify": ("genie testbed verify star-8 --seconds 2",),
    "testbed list": ("genie testbed list",),
    "trace show": ("genie trace show traces/gen_tp2_dp4_gpt3",),
    "trace convert": ("genie trace convert traces/astra_text/DLRM_HybridParallel.txt dlrm --to et --npus 8",),
    "trace validate": ("genie trace validate traces/param_tp2_dp2",),
    "trace import": ("genie trace import tests/data/pytorch_ddp ddp --to et",),
    "trace capture": ("genie trace capture --nproc 4 --out ddp-trace -- tests/data/torch_jobs/ddp_buckets.py",),
    "trace gen": ("genie trace gen --model gpt3-125m --layers 4 --dp 2 --tp 2 --pp 2 --out w --to et",),
    "astra simulate": ("genie astra export traces/gen_tp2_dp4_gpt3 astra-in --topology topologies/star-8.yaml",
                       "genie astra simulate --workload-configuration=astra-in/workload/workload "
                       "--system-configuration=astra-in/system.json --network-configuration=astra-in/network.yml "
                       "--remote-memory-configuration=astra-in/remote_memory.json"),
    "astra export": ("genie astra export traces/gen_tp2_dp4_gpt3 astra-in --topology topologies/star-8.yaml",),
    "astra parse": ("genie astra parse astra-stdout.txt",),
    "astra run": ("genie astra run --binary ./AstraSim_Analytical_Congestion_Unaware "
                  "--workload-configuration=astra-in/workload/workload "
                  "--system-configuration=astra-in/system.json --network-configuration=astra-in/network.yml",),
    "lab render": ("genie lab render topologies/star-4.yaml lab/",),
    "lab shape": ("genie lab shape /vagrant --machine h0 --dry-run",),
    "lab verify": ("genie lab verify /vagrant --seconds 2",),
    "report show": ("genie report show runs/step-sweep",),
    "report compare": ("genie report compare runs/step-sweep runs/step-sweep-again",),
}


def epilog(path: str) -> str | None:
    lines = EXAMPLES.get(path)
    if not lines:
        return None
    # click rewraps a paragraph unless it starts with \b: an example stays one line, to copy as it is
    return "Examples:\n\n\b\n" + "\n".join(lines)


def add_examples(app: Any, prefix: str = "") -> None:
    """Give every registered command of the typer `app` (and of its sub-apps) its example epilog."""
    for info in app.registered_commands:
        name = info.name or (info.callback.__name__.replace("_", "-") if info.callback else "")
        text = epilog(f"{prefix}{name}".strip())
        if text and not info.epilog:
            info.epilog = text
    for group in app.registered_groups:
        add_examples(group.typer_instance, f"{prefix}{group.name} ")
