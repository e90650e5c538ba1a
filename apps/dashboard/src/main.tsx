/** The dashboard's entry: the app into `#app` (its stylesheet is linked from index.html). */
import { render } from "preact"
import { App } from "./App.tsx"

render(<App />, document.getElementById("app")!)
