// The prompt a stepper shows where it opens: which step is on screen and how to move on. It
// sits under the stepping controls and hides once the reader has stepped away from that step.

export class StepPrompt {
  constructor() {
    this.el = document.getElementById("step-prompt");
    if (!this.el) {
      this.el = document.createElement("p");
      this.el.id = "step-prompt";
      const stepper = document.querySelector(".stepper");
      if (stepper) stepper.after(this.el);
    }
    this.el.classList.add("step-prompt");
    this.el.setAttribute("role", "note");
    this.el.hidden = true;
    this.at = null;
  }

  /** Show `text` while step `k` is on screen. */
  show(k, text) {
    this.at = k;
    this.el.textContent = text;
    this.el.hidden = false;
  }

  /** Step `k` is on screen: hide the prompt once it is not the step it was shown for. */
  seen(k) {
    if (this.at !== null && k !== this.at) {
      this.at = null;
      this.el.hidden = true;
    }
  }
}

/** Whether the page's URL names a step (a shared link does; a bare view does not). */
export function urlHasStep() {
  return new URL(window.location.href).searchParams.has("step");
}
