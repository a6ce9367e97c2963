from setuptools import find_packages, setup

setup(
    name="segan-framework",
    version="0.3.0",
    description="A config-driven PyTorch training framework for semantic segmentation and GANs",
    packages=find_packages(include=["framework", "framework.*"]),
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.6",
        "torchvision>=0.21",
        "albumentations>=2.0",
        "opencv-python-headless>=4.8",
        "tensorboard>=2.14",
        "omegaconf>=2.3",
        "pyyaml>=6.0",
        "numpy>=1.24",
        "torchmetrics>=1.3",
        "safetensors>=0.4",
        "tqdm>=4.60",
        "Pillow>=9.0",  # palette PNG masks (framework/data/folder.py)
        # SBD's class maps of VOC trainaug are MATLAB .mat files (framework/data/published/voc.py reads them with
        # scipy.io.loadmat, so no PNGs are written into the user's download)
        "scipy>=1.10",
        "matplotlib>=3.7",  # tools/compare.py's curve plots (framework/comparison/plot.py; Agg, no display)
    ],
    extras_require={
        # tools/export.py --format onnx: the exporter's graph format and the runtime it is checked in
        "export": ["onnx>=1.15", "onnxruntime>=1.17"],
        # encoder: timm:<name> (framework/models/encoders/timm_encoders.py); timm >= 1.0 has forward_intermediates;
        # huggingface_hub (timm's own dependency) finds `encoder_weights: timm` in its local cache
        "timm": ["timm>=1.0", "huggingface_hub>=0.20"],
        # framework.load("user/name") from the local Hub cache and Model.push_to_hub (framework/api/folder.py)
        "hub": ["huggingface_hub>=0.20"],
        # the documentation site (mkdocs.yml): plain mkdocs and its built-in theme, no plugins
        "docs": ["mkdocs>=1.6"],
        # tests/test_docs.py builds the site with --strict, so dev needs mkdocs too
        "dev": ["pytest>=7.4", "pytest-xdist>=3.5", "torchmetrics>=1.3", "ruff>=0.6", "onnx>=1.15", "onnxruntime>=1.17", "timm>=1.0",
                "huggingface_hub>=0.20", "mkdocs>=1.6", "mlflow-skinny>=2.12",
                "mutmut>=3.8,<4",  # mutation testing: tests/scripts/mutation.py, docs/contributing.md
                "submitit>=1.5.4", "optuna>=4.0",  # tests/test_compare_slurm.py (on the Slurm .ci/run starts), test_search.py
                "torch-fidelity>=0.3"],  # FID's default extractor, tested with random weights in its file format
        "fid": ["torch-fidelity>=0.3"],  # FID's default extractor (framework/metrics/image.py)
        # tools/compare.py --launcher slurm (submitit) and tools/search.py (optuna); imported only there
        "cluster": ["submitit>=1.5.4", "optuna>=4.0"],
        # loggers: [mlflow] (framework/engine/loggers/mlflow_logger.py): the client alone, no server
        "mlflow": ["mlflow-skinny>=2.12"],
    },
)
