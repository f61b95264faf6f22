package checkip

// errNoRoute is the error a dial returns when there is no route.
func errNoRoute() error { return wsaENETUNREACH }
