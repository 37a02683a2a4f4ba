# Sourced by the benchmarks' GPU-machine scripts: the analysis's packages (polars, polars-runtime-32,
# adbc-driver-manager, adbc-driver-sqlite, platformdirs), which the GPU machine's image lacks and no registry
# there serves, from the carried .whl-analysis/ (wheels for that machine's Python, `pip download`ed here; or, to fit the
# device's 64 MiB carry limit, unzipped into one folder and packed as .whl-analysis/site.tar.xz), into
# /tmp/sp-site; then PYTHONPATH=/tmp/sp-site:$PWD. Where they are installed already (the development VM): PYTHONPATH=$PWD.
if python3 -c "import polars, adbc_driver_sqlite, platformdirs" 2>/dev/null; then
  export PYTHONPATH=$PWD
elif [ ! -d /tmp/sp-site/polars ]; then
  mkdir -p /tmp/sp-site
  if [ -f .whl-analysis/site.tar.xz ]; then  # the wheels unpacked, xz-compressed: fits the carry limit
    tar -C /tmp/sp-site -xJf .whl-analysis/site.tar.xz
  else
    python3 -m pip install -q --no-index --no-deps --target /tmp/sp-site .whl-analysis/*.whl
  fi
fi
case ":${PYTHONPATH:-}:" in *":$PWD:"*) ;; *) export PYTHONPATH=/tmp/sp-site:$PWD ;; esac
python3 -c "import polars, adbc_driver_sqlite, platformdirs; print('polars', polars.__version__)"
