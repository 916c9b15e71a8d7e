// Graceful stop: the first SIGINT/SIGTERM/SIGUSR1 asks the loop to stop after
// the current step; a second one exits at once.
#pragma once

namespace trainer::engine {

void install_stop_handlers();
bool stop_requested();
int stop_signal();  // the signal that asked, 0 if none

}  // namespace trainer::engine
