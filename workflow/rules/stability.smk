# Seed sweeps and registry-declared parameter sweeps (`make stability`): the same chapter notebook,
# one parameter changed, as an ordinary wildcard job (parallel, cached, any profile, SLURM included).
# `compendium stability` asks for the variants' claims.json as targets, then aggregates them into
# results/<scale>/stability.json and rebuilds the book (see src/compendium/stability.py).
from compendium import stability as _stability


wildcard_constraints:
    variant="[a-z][a-z0-9_]*-[0-9]+",


def variant_params(wildcards):
    import json

    return json.dumps(_stability.variant_params(PLAN, wildcards.slug, wildcards.variant), sort_keys=True)


rule chapter_variant:
    input:
        notebook=chapter_notebook,
        sources=chapter_sources,
        kernel="kernels/compendium/kernel.json",
        assets=chapter_assets,
    output:
        notebook="results/{scale}/{slug}/variants/{variant}/{slug}.ipynb",
        claims="results/{scale}/{slug}/variants/{variant}/claims.json",
        params="results/{scale}/{slug}/variants/{variant}/params.yaml",
        figures=directory("results/{scale}/{slug}/variants/{variant}/figures"),
    params:
        values=variant_params,
        timeout_s=PLAN.timeout_s(),
    log:
        "results/{scale}/logs/{slug}--{variant}.log",
    benchmark:
        "results/{scale}/benchmarks/variants/{slug}--{variant}.tsv"
    threads: chapter_threads
    resources:
        mem_mb=chapter_mem_mb,
        runtime=chapter_runtime_min,
        gpu=chapter_gpus,
    script:
        "../scripts/run_chapter.py"
