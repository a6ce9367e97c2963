"""DCGAN (Radford et al., 2016) built on the framework's GANTask: networks and image datasets.

`custom_imports: [projects.dcgan]` registers DCGANGenerator, DCGANDiscriminator, ImageFolder
and ShapeImages.
"""

from projects.dcgan import datasets, models  # noqa: F401
