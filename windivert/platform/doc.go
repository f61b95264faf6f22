// Package platform is the Windows capture as the daemon sees it (a capture.Platform): the
// redirect engine over WinDivert (package redirect), the fail-closed WFP guard (package
// wfp/guard) and its plan, the WinDivert holder (`router hold`) that keeps the diverting
// handle open across a crash until the guard's permits are gone, the router's reserved
// source ports, and the host's resolver. Its logic (redirectPlatform) builds on every
// operating system, its system parts injected, so that its seams are tested on Linux over
// fakes (windiverttest, wfptest); the files ending in _windows give it the real ones. Only
// the command (cmd/router) imports it; the daemon knows it through package capture.
package platform
