// Package service runs the router as a Windows service and installs it.
//
// Install puts router.exe and the WinDivert files where users cannot write
// (%ProgramFiles%\router, with a protected ACL it checks) and creates the service from
// there: automatic start, restart on failure, SID type unrestricted (the guard's WFP
// permits name NT SERVICE\router), its event log source. RunDaemon runs the daemon under
// the service manager and reports "running" only once the daemon says its capture is
// armed (the armed callback); stop, shutdown and a parameter change (reload) reach it. A
// daemon that fails or ends by itself makes the service fail, so it is restarted.
// LockInstance keeps a second router from running.
//
// On Linux the systemd unit in dist/ plays this part; the package is empty there.
package service
