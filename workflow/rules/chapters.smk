# One generic rule executes any chapter notebook with Papermill, under the project kernel, with the
# parameters of the scale plus command-line overrides. Each job's one real input is its stamp
# (results/<scale>/.stamps/, see compendium.workflow): its content fingerprint. A chapter reruns when
# its notebook, the library code its cells reach (compendium.fingerprint: by definition, comments and
# docstrings aside), its parameters, the content of its assets, the data manifest or the kernel spec
# change, or when its outputs are not what was written; an asset when the code its builder reaches,
# its builder and seed, the assets it requires or the data manifest change, or its files are corrupted.
# The notebook and the assets a job reads are inputs too (ancient: their times decide nothing; an
# asset is not ancient when it is rebuilt for a change, so that its readers run after it).


wildcard_constraints:
    scale="[a-z][a-z0-9_]*",
    slug="|".join(READY) if READY else "(?!)",
    asset="|".join(PLAN.registry.assets) if PLAN.registry.assets else "(?!)",


rule chapter:
    input:
        stamp=chapter_stamp,
        notebook=chapter_notebook,
        assets=chapter_assets,
    output:
        notebook=RESULTS + "/{scale}/{slug}/{slug}.ipynb",
        claims=RESULTS + "/{scale}/{slug}/claims.json",
        params=RESULTS + "/{scale}/{slug}/params.yaml",
        figures=directory(RESULTS + "/{scale}/{slug}/figures"),
    params:
        values=chapter_params,
        timeout_s=PLAN.timeout_s(),
    priority: chapter_priority
    log:
        RESULTS + "/{scale}/logs/{slug}.log",
    benchmark:
        RESULTS + "/{scale}/benchmarks/{slug}.tsv"
    threads: chapter_threads
    resources:
        mem_mb=chapter_mem_mb,
        runtime=chapter_runtime_min,
        gpu=chapter_gpus,
    script:
        "../scripts/run_chapter.py"


rule asset:
    input:
        stamp=asset_stamp,
        upstream=asset_upstream,
    output:
        directory(RESULTS + "/{scale}/assets/{asset}"),
    params:
        builder=asset_builder,
        seed=asset_seed,
    priority: asset_priority
    log:
        RESULTS + "/{scale}/logs/asset-{asset}.log",
    benchmark:
        RESULTS + "/{scale}/benchmarks/asset-{asset}.tsv"
    threads: asset_threads
    resources:
        mem_mb=asset_mem_mb,
        gpu=asset_gpus,
    script:
        "../scripts/build_asset.py"
