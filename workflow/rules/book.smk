# Aggregate every chapter's claims, then stage and build the Jupyter Book (execution off:
# Snakemake is the only executor).


rule claims_table:
    localrule: True
    input:
        unpack(book_chapter_files),
        registry=PLAN.registry.path,
    output:
        RESULTS + "/{scale}/claims.csv",
    params:
        partial=PLAN.partial,  # a partial table (after a failure) lists the failed chapters: rerun
    script:
        "../scripts/aggregate_claims.py"


rule book:
    localrule: True
    input:
        unpack(book_chapter_files),
        csv=RESULTS + "/{scale}/claims.csv",
        static=PLAN.book_static(),
        registry=PLAN.registry.path,
    output:
        RESULTS + "/{scale}/book/_build/html/index.html",
    params:
        profile=PLAN.profile,
        partial=PLAN.partial,
        values=PLAN.all_params_json(),
        pages=" ".join(PLAN.book_static()),  # a page removed from book/ rebuilds it too
    log:
        RESULTS + "/{scale}/logs/book.log",
    benchmark:
        RESULTS + "/{scale}/benchmarks/book.tsv"
    script:
        "../scripts/build_book.py"


onerror:
    # a failed book job must not take the previous good book with it (Snakemake deleted its index.html)
    from compendium.workflow import restore_book

    if restore_book(PLAN.book_index()):
        sys.stderr.write(f"compendium: the previous book is kept: {PLAN.book_index()}\n")


onsuccess:
    from compendium.workflow import restore_book

    restore_book(PLAN.book_index())  # drops the kept link: the book is there
