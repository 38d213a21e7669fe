# One generic rule executes any chapter notebook with Papermill, under the project kernel, with the
# parameters of the scale plus command-line overrides. A change of notebook, of a library file the
# notebook imports (compendium.provenance reads the imports statically, transitively), of the
# parameters, assets, data manifest or rule code reruns the chapter; nothing else does. An asset
# reruns only when a file its builder imports changes.


wildcard_constraints:
    scale="[a-z][a-z0-9_]*",
    slug="|".join(READY) if READY else "(?!)",
    asset="|".join(PLAN.registry.assets) if PLAN.registry.assets else "(?!)",


rule chapter:
    input:
        notebook=chapter_notebook,
        sources=chapter_sources,
        kernel="kernels/compendium/kernel.json",
        assets=chapter_assets,
    output:
        notebook="results/{scale}/{slug}/{slug}.ipynb",
        claims="results/{scale}/{slug}/claims.json",
        params="results/{scale}/{slug}/params.yaml",
        figures=directory("results/{scale}/{slug}/figures"),
    params:
        values=chapter_params,
        timeout_s=PLAN.timeout_s(),
    log:
        "results/{scale}/logs/{slug}.log",
    benchmark:
        "results/{scale}/benchmarks/{slug}.tsv"
    threads: chapter_threads
    resources:
        mem_mb=chapter_mem_mb,
        runtime=chapter_runtime_min,
        gpu=chapter_gpus,
    script:
        "../scripts/run_chapter.py"


rule asset:
    input:
        sources=asset_sources,
        upstream=asset_upstream,
    output:
        directory("results/{scale}/assets/{asset}"),
    params:
        builder=asset_builder,
        seed=asset_seed,
    log:
        "results/{scale}/logs/asset-{asset}.log",
    benchmark:
        "results/{scale}/benchmarks/asset-{asset}.tsv"
    threads: asset_threads
    resources:
        mem_mb=asset_mem_mb,
        gpu=asset_gpus,
    script:
        "../scripts/build_asset.py"
