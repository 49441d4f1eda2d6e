/* Live regions for screen readers: role="status" elements, drawn nowhere, that the live
 * pages write a sentence into when what they show changes state — the connection lost or
 * back, frames late or current, the number of alerts firing.
 *
 * The text on screen changes far more often (a frame's age every 250 ms, a reconnect's
 * countdown on every retry); a region that followed it would talk over everything else.
 * A page tells an announcer the words for the state it is in, as often as it likes; the
 * region changes, and is read out, only when the words do. The first words are the state
 * the page opened in, which the person reads on the page itself: they are not announced.
 */
(function () {
  "use strict";

  function announcer(id) {
    const region = document.getElementById(id);
    let last = null;
    return function say(words) {
      if (last !== null && words !== last) region.textContent = words;
      last = words;
    };
  }

  window.GpulseAnnounce = { announcer: announcer };
})();
