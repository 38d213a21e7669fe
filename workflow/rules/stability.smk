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


def variant_stamp(wildcards):
    slug, variant = wildcards.slug, wildcards.variant
    if not workflow.is_main_process:
        return stamp_path(wildcards.scale, f"variant-{slug}--{variant}")
    return PLAN.variant_stamp(slug, variant, _stability.variant_params(PLAN, slug, variant),
                              _stability.variant_outputs(PLAN.scale, slug, variant))


rule chapter_variant:
    input:
        stamp=variant_stamp,
        notebook=chapter_notebook,
        assets=chapter_assets,
    output:
        notebook=RESULTS + "/{scale}/{slug}/variants/{variant}/{slug}.ipynb",
        claims=RESULTS + "/{scale}/{slug}/variants/{variant}/claims.json",
        params=RESULTS + "/{scale}/{slug}/variants/{variant}/params.yaml",
        figures=directory(RESULTS + "/{scale}/{slug}/variants/{variant}/figures"),
    params:
        values=variant_params,
        timeout_s=PLAN.timeout_s(),
    log:
        RESULTS + "/{scale}/logs/{slug}--{variant}.log",
    benchmark:
        RESULTS + "/{scale}/benchmarks/variants/{slug}--{variant}.tsv"
    threads: chapter_threads
    resources:
        mem_mb=chapter_mem_mb,
        runtime=chapter_runtime_min,
        gpu=chapter_gpus,
    script:
        "../scripts/run_chapter.py"
