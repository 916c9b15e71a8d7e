// trainer --version: build facts and the GPU libraries found at run time.
#pragma once

namespace trainer::cmd {
void print_version();
}
