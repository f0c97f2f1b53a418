"""The toolkit's code that runs on the GPU host, shipped inside the Ansible modules of plugins/modules/.

Standard library only, relative imports only (Ansible's module payload and plain Python both resolve
them), no Ansible imports: pytest, bin/ and the controller package import the same files as
``sglang_sm120.<domain>.<module>``, a module as ``ansible_collections.sm120.sglang.plugins.module_utils.sglang_sm120.<domain>.<module>``.

    host/     what a host is: its facts, GPUs (nvidia-smi), CUDA toolkit, disk and memory
    build/    the SM120 build pipeline and the ELF closure of what it installs
    release/  versioned releases, their venvs and what they really hold, the deploy lock
    patches/  the patch engine, its manifest, lint and diff, the import check and the EAGLE-3 audit
    launch/   the launch plan: flags, SGLang's own ServerArgs check, the start-failure catalogue
    serve/    a running server: health gate, evidence, canary, tiny models, benchmark client, report
    errors.py the one exception base (ToolkitError) and the one path to fail_json
    files.py  atomic writes

Three files are also run on their own, as one file copied elsewhere, and so import nothing of the
package: launch/server_args.py (in a release's venv), serve/tiny_models.py and serve/bench_client.py.
"""
