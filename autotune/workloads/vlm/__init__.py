"""Vision-language jobs: the image pipeline and the vision runner's parts."""
