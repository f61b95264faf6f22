// Package service runs the router as a Windows service and installs it: the service
// control handler (stop, shutdown, reload on a parameter change), the service itself with
// automatic start and restart on failure, its event log source, and the WinDivert files beside
// router.exe. On Linux the systemd unit in dist/ plays this part; the package is empty there.
package service
