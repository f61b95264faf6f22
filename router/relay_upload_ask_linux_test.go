package router

// loopSetups is how many flows r's loops set up themselves.
func loopSetups(r *Router) uint64 { return r.loops.setups.Load() }
