# One generic rule executes any chapter notebook with Papermill, under the project kernel, with the
# parameters of the scale plus command-line overrides. A change of notebook, library module,
# parameters or rule code reruns the chapter; nothing else does.


wildcard_constraints:
    scale="[a-z][a-z0-9_]*",
    slug="|".join(READY) if READY else "(?!)",


rule chapter:
    input:
        notebook=chapter_notebook,
        sources=chapter_sources,
        kernel="kernels/compendium/kernel.json",
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
